"""Issue 43: the real-world corpus (shared/corpus, tests/peers/test_corpus.py's manifest) with the
pool on and off agrees case by case: a representative subset (succeeding, failing, timed-out,
golden-self and working-directory cases, several per folder so that pre-started kernels are
taken), each run both ways by `jupyter nbvalidation run -j 2 --local --no-cache`
(benchmarks/pool_speed.py's corpus_verdicts; `python benchmarks/pool_speed.py --only corpus` runs
the whole corpus both ways and prints both wall times)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import pool_speed  # noqa: E402

SUBSET = ["nbclient/HelloWorld.ipynb", "nbclient/Factorials.ipynb", "nbclient/Unicode.ipynb",
          "nbclient/update-display-id.ipynb", "nbclient/Skip Exceptions with Cell Tags.ipynb",
          "nbclient/Error.ipynb", "nbclient/Autokill.ipynb", "nbclient/Disable Stdin.ipynb", "nbclient/Sleep1s.ipynb",
          "nbclient/Interrupt.ipynb", "papermill/simple_execute.ipynb", "papermill/broken.ipynb",
          "papermill/sysexit1.ipynb", "papermill/blank-vscode.ipynb", "papermill-cwd/read_check.ipynb",
          "nbmake/subdir/cwd_is_nb_location.ipynb", "nbmake/not_json.ipynb"]


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[dict, dict, int]:
    corpus = pool_speed._corpus_module()
    rows = [row for row in corpus.manifest() if row["path"] in SUBSET]
    assert {row["path"] for row in rows} == set(SUBSET), "the subset is in the manifest"
    base = tmp_path_factory.mktemp("corpus-pool")
    on, _wall, pooled = pool_speed.corpus_verdicts(base, rows, True, "on")
    off, _wall, pooled_off = pool_speed.corpus_verdicts(base, rows, False, "off")
    assert pooled_off == 0
    return on, off, pooled


def test_the_pool_was_used(both):
    on, _off, pooled = both
    assert pooled >= 4, f"only {pooled} of {len(on)} runs took a pre-started kernel"


@pytest.mark.parametrize("path", SUBSET)
def test_the_same_verdict_with_the_pool_on_and_off(both, path):
    on, off, _pooled = both
    cases = [k for k in on if k[0] == path]
    assert cases, f"{path} did not run"
    for case in cases:
        assert on[case] == off.get(case), f"{case}: pool on {on[case]}, pool off {off.get(case)}"
