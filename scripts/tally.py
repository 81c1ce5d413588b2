#!/usr/bin/env python3
# tally.py -- Counts one `meson test` run from its testlog.json: TAP cases passed, failed and never
# run, and test programs ok and failed, against the programs the meson files define.
#
#   tally.py [--label NAME] [--suite S]... [--no-suite S]... [--rc N] [--counts FILE] BUILD_DIR
#
# Prints what failed, then one line
#   NAME: P cases passed, F failed, R not run (programs: O ok, X failed)
# and, with --counts, writes "PASSED FAILED" to FILE for the caller's closing total, where FAILED =
# F + R + X. Exit status 0 when FAILED is 0, 1 otherwise, 2 on bad usage.
#
# Rules (nothing may silently not run):
#   - testlog.json holds what the last `meson test` ran; all of it counts. The expected programs are
#     `meson test --list` for the suites (the meson files, no fs.exists); one missing from the log
#     failed ("did not run").
#   - A program whose meson result is not OK failed: FAIL, TIMEOUT, SKIP, ERROR, ... Meson's junit
#     file is not used: with meson 1.0.1 a timeout before the first case counts as a pass there.
#   - A program with no TAP plan failed (cmocka prints `1..N` before the first case).
#   - A case is passed by `ok` without a directive; `not ok` and `ok # SKIP`/`# TODO` failed.
#   - Cases of the plan never reported are "not run", the one a program died in included; the
#     program's failure counts on its own, as it also can when every case passed (a leak at exit).
#   - A non-zero --rc from `meson test` with nothing else failed counts one failure.
import argparse
import json
import os
import re
import subprocess
import sys

PLAN = re.compile(r'^1\.\.(\d+)\s*(?:#\s*(.*))?$')
CASE = re.compile(r'^(not\s+)?ok\b\s*(\d+)?[^#]*(?:#\s*(\S+))?')


def expected_programs(build, suites, no_suites=()):
    cmd = ['meson', 'test', '-C', build, '--list', '--no-rebuild']
    for s in suites:
        cmd += ['--suite', s]
    for s in no_suites:
        cmd += ['--no-suite', s]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip() or f'exit {out.returncode}'
    # Test names look like "project:suite / name"; anything else (ninja chatter) is not one.
    return [l.strip() for l in out.stdout.splitlines() if ' / ' in l], None


class Program:
    def __init__(self, name):
        self.name = name
        self.planned = None  # cases announced by the TAP plan(s); None = no plan printed
        self.passed = 0
        self.failed = 0
        self.not_run = 0  # planned cases never reached
        self.problems = []  # why the program failed; empty = ok

    def parse(self, result, stdout):
        for line in stdout.splitlines():
            line = line.rstrip()
            m = PLAN.match(line)
            if m:
                self.planned = (self.planned or 0) + int(m.group(1))
                if m.group(2) and m.group(2).upper().startswith('SKIP'):
                    self.problems.append(f"plan skipped: '{line}'")
                continue
            m = CASE.match(line)
            if m:
                directive = (m.group(3) or '').upper()
                if m.group(1) or directive.startswith(('SKIP', 'TODO')):
                    self.failed += 1
                else:
                    self.passed += 1
                continue
            if line.startswith('Bail out!'):
                self.problems.append(f"bailed out: '{line}'")
        if result != 'OK':
            self.problems.append(f'meson result {result}')
        if self.planned is None:
            self.problems.append('printed no TAP plan')
        missing = (self.planned or 0) - self.reported
        if missing > 0:
            # Also when meson says OK: a plan it did not hold the program to is still unmet.
            if not self.problems:
                self.problems.append(f'reported {self.reported} of {self.planned} planned cases')
            self.not_run = missing
        elif missing < 0:
            self.problems.append(f'reported {self.reported} cases, the plan said {self.planned}')

    @property
    def reported(self):
        return self.passed + self.failed


def main():
    ap = argparse.ArgumentParser(description='Counts one meson test run.')
    ap.add_argument('--label', default='run')
    ap.add_argument('--suite', action='append', default=[])
    ap.add_argument('--no-suite', action='append', default=[], dest='no_suite')
    ap.add_argument('--rc', type=int, default=0, help="exit status of 'meson test'")
    ap.add_argument('--counts', help='write "PASSED FAILED" here')
    ap.add_argument('build')
    a = ap.parse_args()

    notes = []
    expected, err = expected_programs(a.build, a.suite, a.no_suite)
    if expected is None:
        notes.append(f'cannot list the tests of {a.build}: {err}')
        expected = []
    elif not expected:
        notes.append(f'{a.build} defines no test in suites {a.suite}')

    programs = {}
    log = os.path.join(a.build, 'meson-logs', 'testlog.json')
    try:
        with open(log, encoding='utf-8', errors='replace') as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    name = rec['name']
                except (ValueError, KeyError, TypeError) as e:
                    notes.append(f'{log}:{n}: unreadable record ({e})')
                    continue
                p = Program(name)
                p.parse(str(rec.get('result')), rec.get('stdout') or '')
                if name in programs:
                    p.problems.append('ran twice in one log')
                programs[name] = p
    except OSError as e:
        notes.append(f'cannot read {log}: {e.strerror}')

    for name in expected:
        if name not in programs:
            p = Program(name)
            p.problems.append('did not run')
            programs[name] = p

    passed = sum(p.passed for p in programs.values())
    failed = sum(p.failed for p in programs.values())
    not_run = sum(p.not_run for p in programs.values())
    bad = [p for p in programs.values() if p.problems]
    ok = len(programs) - len(bad)
    if a.rc != 0 and not (failed or not_run or bad or notes):
        notes.append(f"'meson test' exited {a.rc} although every program passed")

    for p in bad:
        planned = '?' if p.planned is None else p.planned
        print(f'{a.label}: FAILED {p.name}: {"; ".join(p.problems)} '
              f'({p.passed} passed, {p.failed} failed of {planned} planned)')
    for n in notes:
        print(f'{a.label}: FAILED {n}')
    print(f'{a.label}: {passed} cases passed, {failed} failed, {not_run} not run '
          f'(programs: {ok} ok, {len(bad)} failed)')

    total_failed = failed + not_run + len(bad) + len(notes)
    if a.counts:
        with open(a.counts, 'w', encoding='utf-8') as f:
            f.write(f'{passed} {total_failed}\n')
    return 1 if total_failed else 0


if __name__ == '__main__':
    sys.exit(main())
