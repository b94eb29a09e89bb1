"""larbin.conf: larbin's syntax, every documented key, errors that name file and line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from larbinpy.config import ConfigError, describe, load_config, parse_config

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parents[1]


def error_of(text: str) -> ConfigError:
    """The ConfigError parsing `text` raises."""
    with pytest.raises(ConfigError) as info:
        parse_config(text, "test.conf")
    return info.value


def test_larbin_263_sample_configuration_loads_unchanged():
    cfg = load_config(FIXTURES / "larbin-2.6.3.conf")
    assert cfg.from_ == "email@address.com"
    assert cfg.user_agent == "larbin_2.6.3"
    assert (cfg.http_port, cfg.pages_connexions, cfg.dns_connexions) == (8081, 100, 5)
    assert cfg.wait_duration == 60 and cfg.depth_in_site == 5
    assert [s.url for s in cfg.start_urls] == ["http://localhost/"]
    assert ".tar" in cfg.forbidden_extensions and ".psd" in cfg.forbidden_extensions
    assert ".z" in cfg.forbidden_extensions  # extensions compare case-insensitively
    assert len(cfg.forbidden_extensions) == 39


def test_shipped_configuration_is_valid():
    cfg = load_config(REPO / "larbin.conf")
    assert cfg.exit_at_end and cfg.start_urls


def test_depth_in_site_applies_to_the_start_urls_after_it():
    cfg = parse_config("startUrl http://a/\ndepthInSite 2\nstartUrl http://b/\n")
    assert [(s.url, s.depth) for s in cfg.start_urls] == [("http://a/", 5), ("http://b/", 2)]


def test_keys_are_case_insensitive_and_quotes_make_one_token():
    cfg = parse_config('USERAGENT "my bot 1.0"  # comment\nwaitduration 2.5\n')
    assert cfg.user_agent == "my bot 1.0" and cfg.wait_duration == 2.5


def test_lists_span_lines_and_end_with_end():
    cfg = parse_config("limitToDomain .fr\n .dk # c\n .uk end\nallowNetworks 10.0.0.0/8 end\n")
    assert cfg.limit_to_domain == [".fr", ".dk", ".uk"]
    assert str(cfg.allow_networks[0]) == "10.0.0.0/8"


def test_repeatable_keys_accumulate():
    cfg = parse_config("output save\noutput links\ndnsServers 127.0.0.1:5353\ndnsServers 9.9.9.9\n")
    assert cfg.outputs == ["save", "links"]
    assert cfg.dns_servers == ["127.0.0.1:5353", "9.9.9.9"]


def test_sizes_accept_suffixes_and_powers():
    cfg = parse_config("hashSize 2^20\nmaxPageSize 2MiB\nwarcMaxSize 1G\n")
    assert (cfg.hash_size, cfg.max_page_size, cfg.warc_max_size) == (1 << 20, 2 << 20, 10**9)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("From a@b\n\nnoSuchKey 1\n", 3, "unknown key"),
        ("waitDuration soon\n", 1, "waitDuration"),
        ("\npagesConnexions 0\n", 2, "between 1"),
        ("forbiddenExtensions .a .b\n", 1, "missing its 'end'"),
        ("forbiddenExtensions .a .b\n.c\nallowNetworks 127.0.0.0/8 end\n", 3,
         "forbiddenExtensions (line 1) is missing its 'end' before allowNetworks"),
        ("limitToDomain .fr .dk .uk\nforbiddenExtensions .a end\n", 2, "missing its 'end'"),
        ("output floppy\n", 1, "expected one of"),
        ("startUrl\nwaitDuration 1\n", 1, "needs a value"),
        ("robots maybe\n", 1, "on or off"),
        ("excludePatterns \"(\" end\n", 1, "regular expression"),
        ("allowNetworks 10.0.0.300/8 end\n", 1, "allowNetworks"),
        ('UserAgent "unterminated\n', 1, "unterminated"),
        ("\n\ncluster http://127.0.0.1:6379/0\n", 3, "redis://host:port/db"),
        ("output save\ncaFile /no/such/ca.pem\n", 2, "no such file"),
        ("warcPrefix ../x\n", 1, "warcPrefix"),
        ("dnsServers 1.2.3.4:99999\n", 1, "bad port"),
        ("startUrl ftp://example.com/\n", 1, "not an http:// or https:// URL"),
        ("\nstartUrl http://[::1/\n", 2, "malformed"),
        ("startUrl http://ok.example/\nstartUrl notaurl\n", 2, "bad startUrl 'notaurl'"),
        ("exitAtEnd maybe\n", 1, "exitAtEnd is a flag: it takes no value"),
        ("depthInSite -1\n", 1, "'-1' is negative: it must be 0 or more"),
    ],
)
def test_errors_name_the_file_and_line(text: str, line: int, words: str):
    err = error_of(text)
    assert err.line == line
    assert str(err).startswith(f"test.conf:{line}: ")
    assert words in str(err)


def test_check_config_prints_the_effective_configuration():
    text = describe(parse_config("waitDuration 3\nstartUrl http://x/\n"))
    assert "waitDuration         3.0" in text
    assert "connectionsPerHost   1" in text  # defaults are shown too


def test_flags_take_on_and_off_words_and_depth_in_site_may_repeat():
    assert parse_config("exitAtEnd yes\n").exit_at_end
    assert parse_config("exitAtEnd on\n").exit_at_end
    assert not parse_config("exitAtEnd off\n").exit_at_end
    cfg = parse_config("depthInSite 2\nstartUrl http://a.example/\ndepthInSite 3\n")
    assert cfg.depth_in_site == 3


def test_a_single_value_key_set_twice_is_reported_with_both_lines(tmp_path: Path):
    conf = tmp_path / "c.conf"
    conf.write_text("httpPort 8081\nFrom a@b\nhttpPort 9\n")
    result = run_cli("check-config", "-c", str(conf), cwd=tmp_path)
    assert f"{conf}:3: httpPort is set twice (lines 1 and 3); line 3 wins" in result.stderr
    assert "httpPort             9" in result.stdout
    assert parse_config("exitAtEnd\nexitAtEnd\n").warnings
    assert not parse_config("startUrl http://a.example/\nstartUrl http://b.example/\n"
                            "output save\noutput links\n").warnings


def test_check_config_shows_what_is_in_effect_and_hides_the_token(tmp_path: Path):
    conf = tmp_path / "c.conf"
    conf.write_text('inputToken "s3cret-token"\n')
    result = run_cli("check-config", "-c", str(conf), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = {key: value.strip() for key, _, value in
             (line.partition(" ") for line in result.stdout.splitlines())
             if key and not key.startswith("#")}
    assert lines["output"] == "save"  # the default output, not "(none)"
    assert "utm_*" in lines["stripParams"] and "(built-in)" in lines["stripParams"]
    assert "s3cret-token" not in result.stdout and lines["inputToken"] == "(set, not shown)"


def test_check_config_piped_into_head_exits_quietly(tmp_path: Path):
    (tmp_path / "larbin.conf").write_text("From a@b\n")
    result = subprocess.run(f"{sys.executable} -m larbinpy check-config | head -1", shell=True,
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.stdout.startswith("# effective configuration")
    assert result.stderr == ""


def test_a_bad_start_url_stops_a_crawl_with_exit_2(tmp_path: Path):
    conf = tmp_path / "bad.conf"
    conf.write_text(f"stateDir {tmp_path}/state\nexitAtEnd\nstartUrl notaurl\n")
    result = run_cli("-c", str(conf), cwd=tmp_path)
    assert result.returncode == 2
    assert f"{conf}:3: bad startUrl" in result.stderr


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the larbinpy command."""
    return subprocess.run(
        [sys.executable, "-m", "larbinpy", *args], cwd=cwd, capture_output=True, text=True,
        timeout=60,
    )


def test_a_bad_configuration_exits_2_naming_file_and_line(tmp_path: Path):
    conf = tmp_path / "bad.conf"
    conf.write_text("From me@x\nwaitDuration 1\npagesConnexions many\n")
    result = run_cli("-c", str(conf), cwd=tmp_path)
    assert result.returncode == 2
    assert f"{conf}:3:" in result.stderr and "pagesConnexions" in result.stderr


def test_check_config_command_validates_and_exits_0(tmp_path: Path):
    result = run_cli("check-config", "-c", str(FIXTURES / "larbin-2.6.3.conf"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "UserAgent            larbin_2.6.3" in result.stdout


def test_check_config_prints_the_expected_false_positive_rate(tmp_path: Path):
    conf = tmp_path / "c.conf"
    conf.write_text("hashSize 2^30\nhashFunctions 7\n")
    result = run_cli("check-config", "-c", str(conf), cwd=tmp_path)
    assert "a Bloom filter, K=7" in result.stdout
    # (1 - e^(-7 * 10^8 / 2^30))^7 = 0.578%: with the exact seen-set, a lookup, not a loss
    assert ("after   100,000,000 URLs: a new URL needs a fingerprint lookup with p = 0.578%"
            in result.stdout)
    assert "(lost)" not in result.stdout
    conf.write_text("hashSize 2^30\nhashFunctions 7\nseenSet bitmap\n")
    result = run_cli("check-config", "-c", str(conf), cwd=tmp_path)
    assert ("after   100,000,000 URLs: a new URL is taken for seen (lost) with p = 0.578%"
            in result.stdout)


def test_a_missing_seed_file_is_a_configuration_error(tmp_path: Path):
    conf = tmp_path / "c.conf"
    conf.write_text("seedFile nope.txt\n")
    result = run_cli("check-config", "-c", str(conf), cwd=tmp_path)
    assert result.returncode == 2 and f"{conf}:1:" in result.stderr


def test_the_sites_in_memory_default_follows_the_politeness_wait() -> None:
    """Unset, maxSitesInMemory is enough sites at work for 1,500 pages a second under
    waitDuration (20,000 at the least, 90,000 at the most); set, it is what was set."""
    def budget(text: str) -> int:
        return parse_config(text, "t.conf").max_sites_in_memory

    assert budget("waitDuration 0\n") == budget("waitDuration 1\n") == 20_000
    assert budget("waitDuration 30\n") == 45_000
    assert budget("waitDuration 60\n") == budget("") == budget("waitDuration 600\n") == 90_000
    assert budget("waitDuration 60\nmaxSitesInMemory 5000\n") == 5000
