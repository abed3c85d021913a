"""The Lambda functions' configuration: ``LAKESYNC_*`` environment variables, validated once per cold start.

* :mod:`~lakesync.aws.settings.variables` -- every variable's name, which function reads which
  (:data:`~lakesync.aws.settings.variables.FUNCTION_ENV_VARS`, the subset the CDK app sets), the limits on values.
* :mod:`~lakesync.aws.settings.env` -- the one reader (:class:`~lakesync.aws.settings.env.Env`) and
  :class:`~lakesync.aws.settings.env.SettingsError`.
* :mod:`~lakesync.aws.settings.validators` -- the readers the families share: gateway ids, table names, the network
  policy and the destinations' secret prefix.
* One module per function family, one class per function: :mod:`~lakesync.aws.settings.api` (the API functions'
  ``Settings``), :mod:`~lakesync.aws.settings.realtime` (the WebSocket functions),
  :mod:`~lakesync.aws.settings.materialise`, :mod:`~lakesync.aws.settings.lake` (``lake_tick``, ``flush_trigger``,
  ``flush``) and :mod:`~lakesync.aws.settings.connectors`. ``health`` and ``rotate_secret`` read none.

An empty variable counts as unset. Every problem is reported at once in one ``SettingsError``.
"""
