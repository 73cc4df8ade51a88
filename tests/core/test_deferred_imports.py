"""jupyter_nbvalidation.core.deferred_imports: rfc3987-syntax's parser is built only when a check
needs it, and every check answers as without the stand-in (its fresh twin: an interpreter
that never imported this package). Each case runs in a fresh interpreter: the stand-in is
about what a process imports from its start."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

VALUES = ["http://example.com/ä", "https://example.com/a?b=c#d", "not an iri", "//host/path", "urn:isbn:0451450523",
          "http://[::1]/", "a b", "#frag", "", "mailto:a@b.c", "http://exa mple.com", "ftp://x/%zz", "é"]
CHECKS = f"""
import jsonschema
fc = jsonschema.FormatChecker()
values = {VALUES!r}
answers = {{f: [fc.conforms(v, f) for v in values] for f in ("iri", "iri-reference")}}
"""


def python(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rfc3987_syntax_is_installed_here():
    # what the tests below are about: jupyter-events' jsonschema[format-nongpl] installs it
    assert importlib.util.find_spec("rfc3987_syntax") is not None


def test_importing_the_package_and_nbformat_builds_no_iri_parser():
    got = python("import sys, jupyter_nbvalidation.cli.main, nbformat, jsonschema\n"
                 "import json; print(json.dumps({'parser': 'rfc3987_syntax.syntax_helpers' in sys.modules,"
                 " 'lark': 'lark' in sys.modules}))")
    assert got == {"parser": False, "lark": False}
    # the fresh twin: without this package, nbformat's import builds it
    assert python("import sys, nbformat, json; print(json.dumps('rfc3987_syntax.syntax_helpers' in sys.modules))")


def test_every_iri_check_answers_as_without_the_stand_in():
    deferred = python("import jupyter_nbvalidation\n" + CHECKS +
                      "import sys, json; answers['loaded'] = 'rfc3987_syntax.syntax_helpers' in sys.modules\n"
                      "print(json.dumps(answers))")
    fresh = python(CHECKS + "import json; print(json.dumps(answers))")
    assert deferred.pop("loaded") is True  # the first check imported the real package
    assert deferred == fresh
    assert fresh["iri"].count(True) >= 3 and fresh["iri"].count(False) >= 3, fresh  # the values tell apart


def test_other_names_and_submodules_read_through_the_stand_in_are_the_real_ones():
    got = python("import jupyter_nbvalidation, sys\n"
                 "import rfc3987_syntax\n"
                 "stand_in = rfc3987_syntax\n"
                 "parser = rfc3987_syntax.syntax_parser\n"  # a name the stand-in does not carry itself
                 "import rfc3987_syntax.utils\n"
                 "real = sys.modules['rfc3987_syntax']\n"
                 "import json; print(json.dumps({'replaced': real is not stand_in,"
                 " 'same_parser': parser is real.syntax_parser,"
                 " 'utils': hasattr(real.utils, 'load_grammar'),"
                 " 'valid': stand_in.is_valid_syntax('iri', 'http://example.com/')}))")
    assert got == {"replaced": True, "same_parser": True, "utils": True, "valid": True}


def test_nothing_is_put_in_place_of_a_package_already_imported():
    got = python("import sys, rfc3987_syntax as before, jupyter_nbvalidation\n"
                 "import json; print(json.dumps(sys.modules['rfc3987_syntax'] is before))")
    assert got is True
