"""`sluice serve`'s settings: one definition each, from flags, the environment or a TOML file
(flags first), `sluice config show` saying where each came from, and the README's reference
generated from the same definitions."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gateway import config
from gateway.cli.main import parser
from gateway.settings import Settings
from gateway.state import broker_settings

REPO = Path(__file__).resolve().parents[2]


def resolve(
    argv: list[str], environ: dict[str, str] | None = None
) -> tuple[Settings, dict[str, str]]:
    return config.resolve(parser().parse_args(["serve", *argv]), environ or {})


def test_every_setting_has_one_definition() -> None:
    fields = {f for f in Settings.__dataclass_fields__}
    assert {o.field for o in config.OPTIONS} == fields
    assert len({o.flag for o in config.OPTIONS}) == len(config.OPTIONS)


def test_flags_beat_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    file = tmp_path / "sluice.toml"
    file.write_text(
        'port = 9001\nmax-request-bytes = 1024\n"group.max.size" = 7\n'
        'cluster = ["etcd://a:2379", "b:2379"]\nauto-create-topics = true\n'
        "offsets.retention.minutes = 60\n"  # a Kafka name unquoted: a table in TOML
    )
    settings, sources = resolve(
        ["--config", str(file), "--port", "9003"], {"SLUICE_MAX_REQUEST_BYTES": "2048"}
    )
    assert settings.port == 9003 and sources["port"] == "flag --port"
    assert settings.max_request_bytes == 2048
    assert sources["max_request_bytes"] == "env SLUICE_MAX_REQUEST_BYTES"
    assert settings.group_max_members == 7 and sources["group_max_members"] == f"file {file}"
    assert settings.cluster == ("http://a:2379", "http://b:2379")
    assert settings.auto_create_topics is True
    assert settings.offsets_retention_minutes == 60
    assert settings.host == "127.0.0.1" and sources["host"] == "default"


def test_config_show_prints_a_file_that_reads_back(tmp_path: Path) -> None:
    settings, sources = resolve(["--port", "0", "--s3-bucket", "b", "--cluster", "etcd://e:1"])
    text = "\n".join(config.describe(settings, sources))
    assert "port = 0  # flag --port" in text
    assert "# s3-endpoint is not set  # default" in text
    file = tmp_path / "shown.toml"
    file.write_text(text)
    assert tomllib.loads(text)["cluster"] == "etcd://e:1"
    again, _ = resolve(["--config", str(file)])
    assert again == settings


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("nonsense = 1\n", "unknown setting 'nonsense'"),
        ("port = -1\n", ": port: must be at least 0"),
        ('cluster = "http://x"\n', "expected etcd://"),
        ("port = \n", "not TOML"),
    ],
)
def test_a_bad_file_names_the_problem(tmp_path: Path, content: str, error: str) -> None:
    file = tmp_path / "bad.toml"
    file.write_text(content)
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--config", str(file)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert error in done.stderr and str(file) in done.stderr and "Traceback" not in done.stderr


def test_a_bad_variable_names_itself() -> None:
    with pytest.raises(config.ConfigError, match=r"\$SLUICE_PORT"):
        resolve([], {"SLUICE_PORT": "eighty"})


def test_the_readme_reference_is_generated_from_the_definitions() -> None:
    readme = (REPO / "README.md").read_text()
    table = "\n".join(config.reference())
    assert table in readme, "regenerate it: sluice config reference"


def test_cors_settings_from_flags_environment_and_file(tmp_path: Path) -> None:
    file = tmp_path / "sluice.toml"
    file.write_text('cors-origins = ["https://App.example.com/", "http://localhost:3000"]\n')
    settings, _ = resolve(
        ["--config", str(file), "--cors-methods", "get, post", "--cors-allow-credentials"],
        {"SLUICE_CORS_HEADERS": "Content-Type,X-Trace"},
    )
    assert settings.cors_origins == ("https://app.example.com", "http://localhost:3000")
    assert settings.cors_methods == ("GET", "POST")
    assert settings.cors_headers == ("Content-Type", "X-Trace")
    assert settings.cors_allow_credentials is True
    assert resolve(["--cors-origins", "https://a.example:443,*"])[0].cors_origins == (
        "https://a.example",
        "*",
    )


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--cors-origins", "app.example.com"),
        ("--cors-origins", "https://app.example.com/path"),
        ("--cors-origins", "https://app.example.com:99999"),
        ("--cors-methods", "*"),
        ("--cors-headers", "X Trace"),
    ],
)
def test_bad_cors_values_are_refused(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        resolve([flag, value])
    assert flag in capsys.readouterr().err


def test_credentials_need_an_origin_listed_by_name() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--cors-origins", "*", "--cors-allow-credentials"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--cors-allow-credentials needs --cors-origins listed by name" in done.stderr


def test_serve_help_lists_every_setting_in_its_group_with_its_default() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--help"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    text = " ".join(done.stdout.split())  # as if unwrapped
    unspaced = "".join(text.split())  # long values are wrapped at their hyphens too
    starts = [text.index(f"{title}:") for title in config.GROUPS.values()]
    assert starts == sorted(starts)
    sections = dict(zip(config.GROUPS, starts, strict=True))
    ends = dict(zip(config.GROUPS, [*starts[1:], len(text)], strict=True))
    for option in config.OPTIONS:
        default = config.shown(option, option.default) or "none"
        assert "".join(f"(default: {default}; ${option.env}".split()) in unspaced, option.flag
        section = text[sections[option.group] : ends[option.group]]
        assert f" --{option.flag} " in section, option.flag
    assert "(default: 8080; $SLUICE_PORT)" in text


def test_the_leader_imbalance_interval_reaches_the_broker() -> None:
    settings, _ = resolve(["--leader-imbalance-check-interval-ms", "2000"])
    assert broker_settings(settings).leader_imbalance_check_interval_ms == 2000
    assert broker_settings(resolve([])[0]).leader_imbalance_check_interval_ms == 30_000
