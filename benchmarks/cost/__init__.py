"""``python -m benchmarks.cost``: what a workload costs on AWS, counted from the requests the code really issues.

Writes ``benchmarks/results/cost.json`` and ``cost.md`` (``--out`` elsewhere; ``--quick`` writes to a temporary
directory unless ``--out`` is given). The method, in short (docs/cost.md has the long form):

* **Counting.** :class:`benchmarks.cost.meter.Meter` hooks every boto3 client the code makes and prices each call in
  its service's units (DynamoDB WRU/RRU from item sizes, including index copies; SQS 64 KB chunks; S3 request tiers);
  items a write replaces and items a filtered or projected read evaluates are read on a separate, uncounted client.
  moto's own capacity figures are not used.
* **Lambda and API Gateway.** The handlers are called as functions (``lambda_handler(event, context)``) on a moto
  server in its own process, as :mod:`benchmarks.push` does. Durations come from a second pass of the same
  workload with the meter off (the meter's lookups would otherwise be timed); GB-seconds use each function's memory
  and architecture from the synthesized stack. These durations are this machine's, standing in for Lambda's.
* **Workloads.** For rows of 250 B and 2 KB (the JSON of one INSERT delta as the client sends it) and pushes of 1,
  10 and 100 deltas: a JWT-authenticated JSON push, then each of 10 clients pulls with its cursor (each delta is
  pulled by 1 client -- the first -- and by all 10). Per row size, a lake workload pushes more deltas and runs the real
  Glue job scripts (``glue_jobs/*.py``) on local Spark against the same moto: flush (which publishes claim-check jobs
  to S3 and SQS), the materialise function on those messages (polled as Lambda's event source would), compaction
  with maintenance, a checkpoint, a flush that releases the log, and idle runs of each job.
* **The API's authorizer.** API Gateway runs ``functions.authorizer`` before every sync route and caches its answer
  per token for 300 s, so how often it runs depends on how often a client calls within that time, which a compressed
  workload cannot show. Every API call here runs the real authorizer (timed like the handlers) and is charged
  :data:`~benchmarks.cost.environment.AUTHORIZER_MISS_RATIO` of an invocation: the assumption of a client calling
  ten times a token and cache period (a pull every 30 s). The per-caller rate limits' counters (one conditional
  ``UpdateItem`` per slice of a client's allowance, :mod:`lakesync.gateway.limits`) are issued by the handlers, so
  the meter counts them.
* **Idle month.** From the synthesized CloudFormation template: schedules and the Glue runs they start (idle runs
  measured, billed at least a minute), SQS long polls of the event source mappings, alarms, dashboards; KMS keys and
  the secret apart.

The parts, one module each: the workloads' sizes, deltas and events (``workloads``), the environment they run in
(``environment``), the push/pull workload (``sync``), the lake (``lake``), the scheduled functions on an idle stack
(``scheduled``), the stack's template (``template``), composing the figures (``figures``), the run (``run``) and
``cost.md`` (``markdown``); beneath them the meter (``meter``, and ``daemon`` in Spark's workers), the arithmetic
(``model``), the price table (``prices``), pricing (``pricing``), the idle month (``idle_month``) and the picture
(``plot``). ``flush_engines`` is the flush engines' benchmark (``python -m benchmarks.cost.flush_engines``).

Options: ``--quick`` (tiny workloads, no Spark, no synth: a smoke run), ``--no-spark``, ``--no-synth``,
``--template FILE`` (a synthesized template instead of synthesizing), ``--out DIR``, ``--label TEXT``.
"""
