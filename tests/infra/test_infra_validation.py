"""Static validation of the synthesized template: cdk-nag AwsSolutions (zero unacknowledged findings, every
acknowledgment with a specific reason) and cfn-lint (clean, W3005 aside)."""

from __future__ import annotations

import subprocess
import sys

# Reasons shared by several acknowledgments are fine; boilerplate is not.
_CFN_LINT = "import sys; from cfnlint.runner import main; sys.exit(main())"
_VAGUE = ("not needed", "n/a", "todo", "fixme", "suppress", "ignore")


def test_synth_passes_cdk_nag_with_no_unacknowledged_findings(either_engine):
    # Given the app synthesized with AwsSolutionsChecks registered as a validation plugin (with each flush engine)
    synth = either_engine
    # Then the synth succeeded and the validation report lists no violation
    findings = [
        f"{v['ruleName']} at {', '.join(c['constructPath'] for c in v.get('violatingConstructs', []))}"
        for v in synth.violations
    ]
    assert findings == []
    assert synth.error is None


def test_acknowledgments_name_specific_rules_with_real_reasons(synth):
    # Given every acknowledgment recorded in the cloud assembly
    acks = [(path, rule, reason) for path, rules in synth.acknowledgments.items() for rule, reason in rules.items()]
    # Then there are some (the stack does acknowledge findings) and each one names an AwsSolutions rule, IAM5 ones
    # down to the single finding, and says why in a sentence of its own
    assert acks
    for path, rule, reason in acks:
        assert "AwsSolutions-" in rule, (path, rule)
        if "AwsSolutions-IAM5" in rule:
            assert "[" in rule and ("Resource::" in rule or "Action::" in rule), (path, rule)
        assert len(reason) >= 40, (path, rule, reason)
        assert not any(word in reason.lower() for word in _VAGUE), (path, rule, reason)


def test_auth_acknowledgment_is_scoped_to_the_api(synth):
    # Given the API Gateway authorization finding (the functions verify JWTs themselves)
    paths = [path for path, rules in synth.acknowledgments.items() if any("APIG4" in r for r in rules)]
    # Then it is acknowledged on the two APIs' constructs only, not stack-wide
    assert sorted(paths) == [f"/{synth.stack.stack_name}/Api", f"/{synth.stack.stack_name}/Realtime/WebSocketApi"]


def test_template_passes_cfn_lint(either_engine):
    # Given the synthesized template (with each flush engine)
    synth = either_engine
    template = synth.outdir / synth.stack.template_file
    # When cfn-lint checks it (W3005, "redundant DependsOn", is CDK's own habit and ignored)
    done = subprocess.run(
        [sys.executable, "-c", _CFN_LINT, "--ignore-checks", "W3005", "--", str(template)],
        capture_output=True,
        text=True,
        check=False,
    )
    # Then it reports nothing
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == ""
