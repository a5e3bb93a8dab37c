"""A deterministic sample of the mutation corpus (``bench/fuzz.py``; ``make fuzz`` runs all of it):
hostile inputs over every format and command end in a conversion with warnings or one clear error,
never a traceback, an internal error, a hang, a partial output, a changed input or a trace the
trace processor has to repair."""

from __future__ import annotations

import time

from bench import fuzz

SAMPLE = 120  # of the whole corpus, spread over it: every format and command turns up


def test_a_sample_of_the_mutation_corpus_fails_in_no_way(tmp_path):
    bases = fuzz.make_bases(tmp_path / "bases")  # the real samples where TRACE2PERFETTO_REALDATA has them
    cases = fuzz.sample(fuzz.plan(bases, fuzz.DEFAULT_CASES, fuzz.DEFAULT_SEED), SAMPLE)
    assert {c.fmt for c in cases} >= {"chrome json", "csv", "metadata", "sqlite", fuzz.LAYOUT}
    assert {c.command for c in cases} == set(fuzz.COMMANDS)
    # a hang is a case that never ends: the limit only has to be far above a loaded machine's time
    started = time.monotonic()
    outcomes = fuzz.run(cases, bases, tmp_path, fuzz.DEFAULT_SEED, timeout=120)
    assert not [o for o in outcomes if o.failures], fuzz.summary(outcomes, time.monotonic() - started)
