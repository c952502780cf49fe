"""Mutation testing of the domain, money and safety code (`make mutate`, `make mutate-sample`).

mutmut (pinned in requirements.lock) plants one small bug at a time in the modules below and
runs the tests that reach the mutated function; a mutant no test notices has "survived".
This script picks the mutants, runs mutmut on them and writes the report:

    .mesh/mutation/summary.json  {"modules": {MODULE: {"killed", "survived", "equivalent"}},
                                  "killed_ratio": killed / (killed + survived), ...}
    .mesh/mutation/report.md     every surviving mutant with its diff

Mutants that cannot change behaviour are listed, each with its reason, in
tests/mutation/equivalent.toml; they count as "equivalent", never as killed, and an entry a
test now kills (or that no longer exists) fails the run, so the list cannot go stale.
A timeout counts as killed; a mutant no test reaches counts as survived.

usage: tools/mutation.py [--module M ...] [--sample N] [--seed S] [--threshold 0.9] [--jobs 2]
                         [--survivors] [--report-only]
With --sample, N mutants per module, each file of a family (`domain`, `services/outbox`) a
module of its own (seeded, so CI always checks the same ones), and the threshold applies to
the pooled ratio; without it every mutant runs and each module must reach the threshold (a
family as a whole). --survivors keeps the last run's results and runs again only the
mutants that survived it (after adding tests: a killed mutant stays killed); --report-only
runs nothing and reports the last run again (after editing the equivalent list).
--module (repeatable; a family's name names every file of it) runs only those modules and
keeps the other modules' stored results, so a full run can be done one module at a time; the
report always covers every module, and one whose mutants were not all run says so
("not_run"). Each run's size and cost per module is kept in .mesh/mutation/runs.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT_FILE = ROOT / "tests" / "mutation" / "equivalent.toml"

# Families: packages each of whose files is a module of its own (sampled on its own), and
# whose name adds them up. Family name -> its directory.
FAMILIES = {"domain": "orchestrator/domain", "services/outbox": "orchestrator/services/outbox"}


def family_files(family: str) -> dict[str, tuple[str, frozenset[str] | None]]:
    """`family/<file stem>` -> (source file, None) for each file of the family's package."""
    directory = FAMILIES[family]
    return {f"{family}/{path.stem}": (f"{directory}/{path.name}", None)
            for path in sorted((ROOT / directory).glob("*.py")) if path.stem != "__init__"}


# Report name -> (source file, the functions mutated there; None for all of them).
MODULES: dict[str, tuple[str, frozenset[str] | None]] = {
    **family_files("domain"),
    "db/placement": ("orchestrator/db/placement.py", None),
    "db/nonces": ("orchestrator/db/nonces.py", None),
    "db/outbox": ("orchestrator/db/outbox.py", None),
    **family_files("services/outbox"),
    "chain/errors": ("orchestrator/chain/errors.py", None),
    "api/auth": ("orchestrator/api/auth.py", None),
    "api/limits": ("orchestrator/api/limits.py", None),
    "storage/blobs": ("orchestrator/storage/blobs.py", None),
    "agent/spool": ("agent/spool.py", None),
    "agent/connection": ("agent/connection.py", None),
    "services/settlement": ("orchestrator/services/settlement.py", None),
}


def family_of(module: str) -> str | None:
    return next((family for family in FAMILIES if module.startswith(f"{family}/")), None)


GATED = (*FAMILIES, *(name for name in MODULES if family_of(name) is None))
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
SURVIVED = {"survived", "no tests", "suspicious", "skipped"}
_MANGLED = re.compile(r"^x(?:ǁ(?P<cls>[^ǁ]+)ǁ|_)(?P<func>.+)__mutmut_\d+$")


@dataclass
class Tally:
    killed: int = 0
    survived: int = 0
    equivalent: int = 0
    not_run: int = 0
    timeouts: int = 0  # among the killed: no test failed, one ran past mutmut's time limit
    survivors: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        judged = self.killed + self.survived
        return self.killed / judged if judged else None


def function_of(mutant: str) -> str:
    """`orchestrator.db.nonces.x_claim_nonce__mutmut_3` -> `claim_nonce` (methods: `Class.m`)."""
    match = _MANGLED.match(mutant.rsplit(".", 1)[1])
    if match is None:
        raise ValueError(f"not a mutmut mutant name: {mutant}")
    return f"{match['cls']}.{match['func']}" if match["cls"] else match["func"]


def module_of(mutant: str) -> str | None:
    path = mutant.rsplit(".", 1)[0].replace(".", "/") + ".py"
    for name, (source, functions) in MODULES.items():
        if path == source and (
                functions is None or function_of(mutant).rsplit(".", 1)[-1] in functions):
            return name
    return None


def all_mutants() -> dict[str, list[str]]:
    """Every mutant mutmut generates for each module (pure: nothing is run)."""
    from mutmut.mutation.file_mutation import mutate_file_contents
    from mutmut.utils.format_utils import get_mutant_name

    names: dict[str, list[str]] = {name: [] for name in MODULES}
    for source in sorted({source for source, _ in MODULES.values()}):
        relative = Path(source)
        mutated = mutate_file_contents(source, (ROOT / relative).read_text())
        for short in mutated.mutant_names:
            mutant = get_mutant_name(relative, short)
            module = module_of(mutant)
            if module is not None:
                names[module].append(mutant)
    return names


def load_equivalent() -> dict[str, str]:
    data = tomllib.loads(EQUIVALENT_FILE.read_text())
    listed: dict[str, str] = data.get("mutants", {})
    blank = [name for name, reason in listed.items() if not str(reason).strip()]
    if blank:
        raise SystemExit(f"mutation: {EQUIVALENT_FILE.name} lists mutants without a reason: "
                         f"{blank}")
    return listed


def run_mutmut(selection: list[str], jobs: int, whole_modules: bool, fresh: bool,
               log: Path) -> None:
    """Run mutmut, from a fresh `mutants/` unless the last run's results are to be kept."""
    if fresh:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    if whole_modules:  # globs: fnmatch-ing thousands of names one by one is slow
        # One glob per function that matches its mutants and its own name alike: mutmut also
        # picks the clean run's tests with these globs, so the clean run takes only the tests
        # that reach these functions (a `__mutmut_*` glob matches no function name, and the
        # clean run fell back to the whole test selection, anvil and all).
        patterns = sorted({f"{m.rsplit('.', 1)[0]}.x*{function_of(m).rsplit('.', 1)[-1]}*"
                           for m in selection})
    else:
        patterns = selection
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *patterns]
    env = os.environ | {"CI": os.environ.get("CI", ""), "PYTHONDONTWRITEBYTECODE": "1"}
    log.parent.mkdir(parents=True, exist_ok=True)
    for attempt in (1, 2):
        with log.open("w") as out:
            result = subprocess.run(command, cwd=ROOT, env=env, stdout=out,
                                    stderr=subprocess.STDOUT)
        # The unmutated tests failing is no verdict on any mutant; on a loaded machine a
        # timing-sensitive chain test can, once: try again before giving up.
        text = log.read_text(errors="replace")
        unmutated_failed = "Failed to run clean test" in text or "failed to collect stats" in text
        if result.returncode == 0 or not unmutated_failed or attempt == 2:
            break
        print(f"mutation: the clean run failed; trying once more (see {log})", file=sys.stderr)
    if result.returncode != 0:
        raise SystemExit(f"mutation: mutmut failed (exit {result.returncode}); see {log}")


def results() -> dict[str, str]:
    """mutant -> status, from mutmut's per-file records."""
    from mutmut.__main__ import status_by_exit_code

    statuses: dict[str, str] = {}
    if not (ROOT / "mutants").is_dir():
        return statuses
    for meta in (ROOT / "mutants").rglob("*.py.meta"):
        for mutant, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            statuses[mutant] = status_by_exit_code[code]
    return statuses


def diff_of(mutant: str) -> str:
    from mutmut.__main__ import get_diff_for_mutant

    try:
        return get_diff_for_mutant(mutant)
    except Exception as exc:  # a report line is better than no report
        return f"(no diff: {type(exc).__name__}: {exc})"


def record_run(path: Path, chosen: list[str], seconds: float, kind: str) -> None:
    """Append one run (its modules, mutants and wall time) to the run log."""
    runs = json.loads(path.read_text()) if path.exists() else []
    per_module: dict[str, int] = {}
    for mutant in chosen:
        module = module_of(mutant)
        if module is not None:
            per_module[module] = per_module.get(module, 0) + 1
    runs.append({"kind": kind, "mutants": per_module, "duration_s": round(seconds, 1),
                 "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    path.write_text(json.dumps(runs, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=0, help="mutants per module (0: all)")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--out", type=Path, default=ROOT / ".mesh" / "mutation")
    parser.add_argument("--survivors", action="store_true",
                        help="run again only the mutants the last run left alive")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: report the last run's results again")
    parser.add_argument("--module", action="append", default=[], metavar="MODULE",
                        help="run only this module (repeatable; a family, such as `domain`: "
                             "every file of it)")
    args = parser.parse_args()
    unknown = [m for m in args.module if m not in MODULES and m not in FAMILIES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from: "
                     f"{', '.join([*FAMILIES, *MODULES])}")
    wanted = {name for name in MODULES
              if name in args.module or family_of(name) in args.module}

    os.chdir(ROOT)
    started = time.monotonic()
    equivalent = load_equivalent()
    generated = all_mutants()
    rng = random.Random(args.seed)
    selection = {
        module: sorted(rng.sample(names, min(args.sample, len(names))) if args.sample
                       else names)
        for module, names in generated.items()}
    chosen = [m for module, names in selection.items() for m in names
              if not wanted or module in wanted]
    if args.survivors:
        last = results()
        chosen = [m for m in chosen if last.get(m) in SURVIVED and m not in equivalent]
    if chosen and not args.report_only:
        if wanted and not args.survivors:
            # mutmut regenerates only sources changed since its copy: a module just added to
            # the list still has an unmutated copy under mutants/, and would match nothing.
            for module in wanted:
                for stale_copy in (f"{MODULES[module][0]}", f"{MODULES[module][0]}.meta"):
                    (ROOT / "mutants" / stale_copy).unlink(missing_ok=True)
        run_started = time.monotonic()
        run_mutmut(chosen, args.jobs, whole_modules=not (args.sample or args.survivors),
                   fresh=not (args.survivors or wanted), log=args.out / "mutmut.log")
        record_run(args.out / "runs.json", chosen, time.monotonic() - run_started,
                   "survivors" if args.survivors else
                   f"sample {args.sample}" if args.sample else "full")
    statuses = results()

    tallies = {module: Tally() for module in MODULES}
    stale: list[str] = []
    for module, names in selection.items():
        tally = tallies[module]
        for mutant in names:
            status = statuses.get(mutant, "not checked")
            if mutant in equivalent:
                if status in KILLED:
                    stale.append(f"{mutant} is killed now: drop it from {EQUIVALENT_FILE.name}")
                tally.equivalent += 1
            elif status in KILLED:
                tally.killed += 1
                tally.timeouts += status == "timeout"
            elif status in SURVIVED:
                tally.survived += 1
                tally.survivors.append(mutant)
            else:
                tally.not_run += 1
    families = {family: Tally() for family in FAMILIES}
    for module, t in tallies.items():
        family = family_of(module)
        if family is not None:
            families[family].killed += t.killed
            families[family].survived += t.survived
            families[family].equivalent += t.equivalent
            families[family].not_run += t.not_run
            families[family].timeouts += t.timeouts
    tallies = {**families, **tallies}
    every = {m for names in generated.values() for m in names}
    stale += [f"{m} no longer exists: drop it from {EQUIVALENT_FILE.name}"
              for m in sorted(equivalent) if m not in every]

    killed = sum(t.killed for name, t in tallies.items() if name in GATED)
    survived = sum(t.survived for name, t in tallies.items() if name in GATED)
    summary = {
        "modules": {module: {"killed": t.killed, "survived": t.survived,
                             "equivalent": t.equivalent, "not_run": t.not_run,
                             "timeouts": t.timeouts, "killed_ratio": t.ratio}
                    for module, t in tallies.items()},
        "killed_ratio": killed / (killed + survived) if killed + survived else None,
        "sample_per_module": args.sample or None,
        "seed": args.seed if args.sample else None,
        "threshold": args.threshold,
        "duration_s": round(time.monotonic() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = ["# Mutation report", "", "| module | killed | survived | equivalent | killed % |",
             "|---|---:|---:|---:|---:|"]
    for module, t in tallies.items():
        ratio = "-" if t.ratio is None else f"{100 * t.ratio:.1f}"
        lines.append(f"| {module} | {t.killed} | {t.survived} | {t.equivalent} | {ratio} |")
    for module, t in tallies.items():
        if t.survivors and module not in FAMILIES:
            lines += ["", f"## Survivors in {module}", ""]
            for mutant in t.survivors:
                lines += [f"### {mutant} ({statuses.get(mutant)})", "", "```diff",
                          diff_of(mutant), "```", ""]
    (args.out / "report.md").write_text("\n".join(lines) + "\n")

    for module, t in tallies.items():
        ratio = "  -  " if t.ratio is None else f"{100 * t.ratio:5.1f}"
        print(f"mutation: {module:25} {ratio} % killed  ({t.killed} killed, {t.survived} "
              f"survived, {t.equivalent} equivalent)")
    print(f"mutation: report in {args.out / 'report.md'}, {summary['duration_s']} s")
    failures = list(stale)
    gated = set(GATED)
    if wanted:  # one module's run answers for that module only
        gated = set(wanted)
        gated |= {family for family in FAMILIES
                  if all(name in wanted for name in MODULES if family_of(name) == family)}
    failures += [f"{module}: {t.not_run} mutants were not run" for module, t in tallies.items()
                 if t.not_run and module in gated]
    if args.sample:
        pooled = summary["killed_ratio"]
        if pooled is not None and pooled < args.threshold:
            failures.append(f"sample: {100 * pooled:.1f} % killed, below "
                            f"{100 * args.threshold:.0f} %")
    else:
        failures += [f"{module}: {100 * t.ratio:.1f} % killed, below "
                     f"{100 * args.threshold:.0f} %" for module, t in tallies.items()
                     if module in gated and t.ratio is not None and t.ratio < args.threshold]
    for failure in failures:
        print(f"mutation: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
