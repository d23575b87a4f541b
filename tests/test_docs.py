"""The docs match the code: one source per config key, paths and modules that exist, a README that runs.

- `docs/configuration.md` is generated from the config models (`devkit.config_reference`); the
  committed file must be what the models generate today, and `conf/local.toml` must name every key
  the models have, no other, with the models' default wherever it sets a defaulted key.
- Every repository path (`app/...`, `conf/...`, `docs/...`, ...), dotted module name (`sharelake.x.y`,
  `sharelake.cli.main`), relative link and config key named in README.md and docs/ must exist.
- The README's "On your own broker" example is extracted as printed (tests/readme_example.py);
  tests/test_ingest_job_submit.py runs it against the session's broker.
"""

from __future__ import annotations

import importlib
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_core import PydanticUndefined

from devkit.config_reference import FREE_FORM, documented_keys, reference
from tests.job_runner import ROOT
from tests.readme_example import COMMAND, own_broker_example

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# -- one source per config key -------------------------------------------------------------------


def test_configuration_reference_is_generated_from_the_models() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == reference(), (
        "docs/configuration.md differs from the config models: run "
        "`python -m devkit.config_reference > docs/configuration.md` (edit the models' descriptions, not the file)"
    )


def toml_keys(text: str) -> tuple[set[str], set[str]]:
    """The keys a config file names (set, and commented out as examples), as documented keys are
    spelled: `topics.orders.table_path` -> `topics.<name>.table_path`; sections count as keys."""
    named: set[str] = set()
    free: set[str] = set()  # keys of free-form sections: any is fine
    section = ""
    for line in text.splitlines():
        header = re.match(r"^#?\s*\[([\w.<>-]+)\]\s*(#.*)?$", line)
        if header:
            section = re.sub(r"^topics\.[\w-]+", "topics.<name>", header.group(1))
            named.add(section)
            continue
        entry = re.match(r'^#?\s*("[^"]+"|[A-Za-z_]\w*)\s*=\s*\S', line)
        if entry:
            key = f"{section}.{entry.group(1).strip(chr(34))}"
            (free if section in FREE_FORM else named).add(key)
    return named, free


def as_documented(key: str) -> str:
    """`topics.<name>.payload.format` is a `payload.format` key (`write` keys the same)."""
    return re.sub(r"^topics\.<name>\.(payload|write)\.", r"\1.", key)


def test_local_toml_names_every_key_with_its_default() -> None:
    text = (ROOT / "conf" / "local.toml").read_text()
    keys = documented_keys()
    sections = {k.rsplit(".", 1)[0] for k in keys} | {"topics.<name>.payload", "topics.<name>.write", *FREE_FORM}
    named, _ = toml_keys(text)
    unknown = sorted(k for k in named if as_documented(k) not in keys and k not in sections)
    assert not unknown, f"conf/local.toml names keys the config models do not have: {unknown}"
    missing = sorted(k for k in keys if k not in named and not k.startswith("topics.<name>.payload"))
    assert not missing, f"conf/local.toml does not name these keys (set or commented out): {missing}"
    stale = []
    for section, values in tomllib.loads(text).items():
        for key, value in values.items():
            field = keys.get(f"{section}.{key}")
            if field is None or isinstance(value, dict) or section in FREE_FORM:
                continue
            default = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
            if default not in (None, PydanticUndefined) and value != default:
                stale.append(f"{section}.{key} = {value!r} (the models' default: {default!r})")
    assert not stale, f"conf/local.toml sets keys to other values than their defaults: {stale}"


def test_the_key_check_fails_on_a_stale_key() -> None:
    named, _ = toml_keys('[pump]\nmemberz = 4\n# [payload.registry]\n# url = "x"\n[topics.a.payload]\nformat = "raw"\n')
    keys = documented_keys()
    assert named == {"pump", "pump.memberz", "payload.registry", "payload.registry.url", "topics.<name>.payload",
                     "topics.<name>.payload.format"}  # fmt: skip
    assert [k for k in named if "." in k and as_documented(k) not in keys] == ["pump.memberz"]


# -- paths, modules, links and keys named in the docs ---------------------------------------------

PATH = re.compile(r"(?<![\w./-])((?:app|conf|jobs|tests|bench|devkit|docs)/[\w./*<>{}-]*)")
MODULE = re.compile(r"(?<![\w./-])(sharelake(?:\.[A-Za-z_]\w*)+)")
# names under `sharelake.` that are not modules: a record header, loggers of the subcommands
NOT_MODULES = {
    "sharelake.replay_of",
    "sharelake.progress",
    "sharelake.kafka.client",
    "sharelake.check",
    "sharelake.ingest",
    "sharelake.maintain",
    "sharelake.replay",
}
LINK = re.compile(r"\]\(([^)\s]+)\)")
SECTIONS = "kafka|pump|batch|delta|run|payload|dead_letter|metrics|maintenance|topics|spark_conf"
OTHER_TOOLS_NAMES = {"batch.num.messages"}  # librdkafka's producer setting, not a Sharelake key
CONFIG_KEY = re.compile(rf"(?<![\w./-])((?:{SECTIONS})\.[a-z_<>][\w.<>]*)")


def code_spans(text: str) -> Iterator[str]:
    """The inline code spans of a markdown text (fenced blocks left out)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    yield from re.findall(r"`([^`\n]+)`", prose)


def path_problems(text: str, base: Path) -> list[str]:
    """Repository paths, modules, relative links and config keys in `text` that do not exist."""
    problems = []
    keys = documented_keys()
    for span in code_spans(text):
        for found in PATH.findall(span):
            path = found.rstrip(".,:;)").split("::")[0]
            pattern = re.sub(r"<[^>]*>|\{[^}]*\}", "*", path)
            if not (any(ROOT.glob(pattern.rstrip("/"))) if "*" in pattern else (ROOT / path).exists()):
                problems.append(f"path {path}")
        for found in MODULE.findall(span):
            if found.rstrip(".") not in NOT_MODULES and not module_exists(found.rstrip(".")):
                problems.append(f"module {found}")
        for found in [] if "is not a known key" in span else CONFIG_KEY.findall(span):  # the error line's example
            key = re.sub(r"^topics\.<?\w+>?(?=\.|$)", "topics.<name>", found.rstrip("."))
            if any(c.isupper() for c in key) or key in OTHER_TOOLS_NAMES:
                continue  # a Delta table property (delta.logRetentionDuration) or another tool's setting
            if key.startswith(FREE_FORM) or as_documented(key) in keys or key in {k.rsplit(".", 1)[0] for k in keys}:
                continue
            problems.append(f"config key {key}")
    for link in LINK.findall(text):
        if not re.match(r"^(https?:|mailto:|#)", link) and not (base / link.split("#")[0]).exists():
            problems.append(f"link {link}")
    return problems


def module_exists(dotted: str) -> bool:
    """`sharelake.x.y` is a module or package of the repository (under app/), or an attribute defined in one
    (`sharelake.cli.main`)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        stem = (ROOT / "app").joinpath(*parts[:n])
        if stem.with_suffix(".py").is_file() or (stem / "__init__.py").is_file():
            obj: object = importlib.import_module(".".join(parts[:n]))
            for attr in parts[n:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_docs_name_what_exists(doc: Path) -> None:
    problems = path_problems(doc.read_text(), doc.parent)
    assert not problems, f"{doc.relative_to(ROOT)} names what does not exist: {problems}"


def test_the_docs_check_fails_on_what_does_not_exist() -> None:
    text = (
        "See `app/sharelake/run/pipeline.py`, `app/no_such.py`, `conf/spark/<profile>.properties`,\n"
        "`conf/nothing/*.xml`, `sharelake.cli.main`, `sharelake.sink.payload`,\n"
        "`sharelake.cli.no_such_function`, `kafka.topic`, `pump.memberz`,\n"
        "`delta.logRetentionDuration`, [the manual](docs/configuration.md), [gone](docs/gone.md).\n"
        "```\napp/not/checked/in/a/fenced/block.py\n```\n"
    )
    assert path_problems(text, ROOT) == [
        "path app/no_such.py",
        "path conf/nothing/*.xml",
        "module sharelake.sink.payload",
        "module sharelake.cli.no_such_function",
        "config key pump.memberz",
        "link docs/gone.md",
    ]


# -- the README's "On your own broker" runs as printed ------------------------------------------


def test_the_example_check_fails_on_a_changed_readme() -> None:
    """The extraction refuses a section whose blocks are not one toml block, then one command."""
    with pytest.raises(AssertionError, match="one toml block"):
        own_broker_example("\n## On your own broker\n```bash\nsharelake ingest\n```\n## Next\n")
    config, command = own_broker_example((ROOT / "README.md").read_text())
    assert shlex.split(command, comments=True)[:2] == COMMAND and "[kafka]" in config
    # the README's example itself runs in tests/test_ingest_job_submit.py, submitted and installed
