"""Every rule a document or profile names exists in the workflow, and every script a document
names exists."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import ROOT

# The documents that describe the current workflow.
DOCS = [
    ROOT / "README.md",
    ROOT / "docs" / "cluster.md",
    ROOT / "docs" / "pipeline.md",
    ROOT / "docs" / "backends.md",
    ROOT / "docs" / "examples" / "h200" / "README.md",
]
PROFILES = sorted((ROOT / "profiles").glob("*/config.yaml"))
# Keys of a Snakemake profile whose own keys are rule names.
PER_RULE_KEYS = ("set-resources", "set-threads", "groups")


def workflow_rules() -> set[str]:
    """Return the name of every rule the Snakefile and its rule files define."""
    files = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
    return {m for f in files for m in re.findall(r"^rule (\w+):", f.read_text(), re.M)}


def rules_in_profile(profile: dict) -> set[str]:
    """Return the rule names a profile's per-rule keys use."""
    return {rule for key in PER_RULE_KEYS for rule in (profile.get(key) or {})}


def rules_in_doc(text: str) -> set[str]:
    """Return the rule names a Markdown document names: "rule `x`" or "`x` rule", the first
    column of a table headed "Rule", and the per-rule keys of its YAML blocks."""
    names = set(re.findall(r"\brules? `(\w+)`", text)) | set(re.findall(r"`(\w+)` rules?\b", text))
    in_rule_table = False
    for line in text.splitlines():
        if line.startswith("| Rule |"):
            in_rule_table = True
        elif not line.startswith("|"):
            in_rule_table = False
        elif in_rule_table:
            names |= set(re.findall(r"`(\w+)`", line.split("|")[1]))
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        names |= rules_in_profile(yaml.safe_load(block) or {})
    return names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_doc_names_only_rules_that_exist(doc):
    missing = rules_in_doc(doc.read_text()) - workflow_rules()
    assert not missing, f"{doc.relative_to(ROOT)} names rules the workflow lacks: {missing}"


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_profile_names_only_rules_that_exist(profile):
    missing = rules_in_profile(yaml.safe_load(profile.read_text())) - workflow_rules()
    assert not missing, f"{profile.relative_to(ROOT)} sets rules the workflow lacks: {missing}"


def test_the_cluster_doc_is_read():
    # The parser finds the SLURM table's and the Kubernetes profile's rules.
    names = rules_in_doc((ROOT / "docs" / "cluster.md").read_text())
    assert {"build_kernel", "bench_layout", "tables"} <= names


@pytest.mark.parametrize(
    "doc",
    [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_a_doc_names_only_scripts_that_exist(doc):
    named = set(re.findall(r"\b((?:tools|gpu)/[\w.-]+\.(?:sh|py))\b", doc.read_text()))
    missing = sorted(p for p in named if not (ROOT / p).exists() and p not in RETIRED)
    assert not missing, f"{doc.relative_to(ROOT)} names scripts that do not exist: {missing}"


# Scripts folded into tools/gpu.sh, each with the task that runs it now (None: superseded, no
# task). A changelog, a log of past runs, names them as they ran; another doc only beside the task.
RETIRED = {
    "tools/device_sweep.sh": "tools/gpu.sh sweep",
    "tools/answer_time.sh": "tools/gpu.sh answer-time",
    "tools/engine_step.sh": "tools/gpu.sh engine-step",
    "tools/h200_example.sh": "tools/gpu.sh example",
    "tools/h200_layouts.sh": "tools/gpu.sh layouts",
    "tools/h200_step.sh": "tools/gpu.sh step",
    "tools/h200_engine_tables.sh": "tools/gpu.sh engine-tables",
    "tools/h200_engine_tune.sh": "tools/gpu.sh engine-tune",
    "tools/h200_engine_check.sh": "tools/gpu.sh engine-check",
    "tools/h200_engine_recheck.sh": None,
    "tools/h200_engine_safe.sh": None,
}


def test_retired_scripts_are_gone_and_named_only_as_history():
    assert not [p for p in RETIRED if (ROOT / p).exists()]
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for doc in (d for d in docs if d.name != "CHANGELOG.md"):
        for paragraph in doc.read_text().split("\n\n"):
            for script in (p for p in RETIRED if p in paragraph):
                task = RETIRED[script] or "(superseded)"
                beside = "tools/gpu.sh" in paragraph and task.split()[-1] in paragraph
                assert beside, f"{doc.relative_to(ROOT)}: {script} without {task}"
