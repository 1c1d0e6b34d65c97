"""``orleanspy spark run`` (progress bar over a real gateway) and the [spark] configuration."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from orleanspy import ConfigurationError
from orleanspy.spark import SparkOptions, SparkUnavailableError
from orleanspy.spark.create import create_session
from orleanspy.testing import TestCluster
from silo.cli import main
from silo.config import load_config
from silo.spark_config import apply_spark_overrides, parse_spark
from silo.spark_progress import ProgressBar, run_spark_job
from tests.integration.silo_process import SiloLauncher, run_cli_to_end


@pytest.mark.spark
async def test_spark_run_draws_progress_and_returns_the_result(
    spark_cluster: TestCluster,
) -> None:
    out = io.StringIO()

    result = await run_spark_job(spark_cluster.client, "Analytics", "cli", "sleepy", [4, 0.4],
                                 interval=0.1, stream=out)

    lines = out.getvalue().splitlines()
    assert result == 40
    assert lines[-1].startswith("[" + "#" * 30 + "] 100.0%")
    assert lines[-1].endswith("Analytics/cli.sleepy: sleepy  done")
    assert len(lines) >= 2  # at least one line while the job ran


def test_progress_bar_renders_tasks_and_never_goes_back() -> None:
    bar = ProgressBar(io.StringIO(), tty=False)

    first = bar.render([{"tasks_done": 3, "tasks_total": 6, "fraction": 0.5, "stage": "s"}])
    second = bar.render([{"tasks_done": 3, "tasks_total": 12, "fraction": 0.25}])

    assert "50.0%" in first and "3/6 tasks" in first and first.endswith("s")
    assert "50.0%" in second and "3/12 tasks" in second


def test_progress_bar_final_line_keeps_the_task_counts() -> None:
    # finish() renders no jobs: the final line keeps the last task counts seen.
    out = io.StringIO()
    bar = ProgressBar(out, tty=False)
    bar.update([{"tasks_done": 3, "tasks_total": 8, "fraction": 0.375}])
    bar.finish(True)

    last = out.getvalue().splitlines()[-1]
    assert "100.0%" in last and "8/8 tasks" in last and last.endswith("done"), last


def test_progress_bar_on_a_terminal_is_drawn_by_rich() -> None:
    out = io.StringIO()
    bar = ProgressBar(out, tty=True)
    bar.update([{"tasks_done": 3, "tasks_total": 6, "fraction": 0.5, "stage": "stage 1"}])
    bar.finish(True)

    last = out.getvalue().rstrip().splitlines()[-1]
    assert last.startswith("done ") and "100%" in last and "6/6 tasks" in last, last


def test_spark_config_from_toml_table(tmp_path: Path) -> None:
    config = tmp_path / "orleanspy.toml"
    config.write_text(
        'app = ["x.grains"]\n[spark]\nmaster = "local[2]"\napp_name = "clicks"\n'
        '"spark.sql.shuffle.partitions" = 8\n[spark.conf]\n"spark.ui.enabled" = false\n'
    )

    options = load_config(config).spark

    assert options == SparkOptions(master="local[2]", app_name="clicks", conf={
        "spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"})


def test_spark_config_unknown_key_names_the_fix() -> None:
    with pytest.raises(ConfigurationError, match="did you mean master"):
        parse_spark({"mastr": "local"}, "f.toml")
    with pytest.raises(ConfigurationError, match=r"start with 'spark\.'"):
        SparkOptions(conf={"sql.shuffle.partitions": 2})


def test_spark_overrides_environment_then_flags() -> None:
    base = SparkOptions(master="local[2]", conf={"spark.a": "1"})

    options = apply_spark_overrides(
        base, master="spark://h:7077", conf=["spark.b=2"],
        environ={"ORLEANSPY_SPARK_REMOTE": "sc://localhost:15002"},
    )

    assert options is not None
    assert options.master == "spark://h:7077"
    assert options.connect_url == "sc://localhost:15002"
    assert dict(options.conf) == {"spark.a": "1", "spark.b": "2"}
    assert apply_spark_overrides(None, environ={}) is None
    with pytest.raises(ConfigurationError, match="KEY=VALUE"):
        apply_spark_overrides(None, conf=["novalue"], environ={})


def test_spark_connect_url_in_master_means_connect() -> None:
    options = SparkOptions(master="sc://localhost:15002")

    assert options.connect_url == "sc://localhost:15002"
    assert options.session_conf() == {}  # driver settings belong to the Connect server


def test_spark_missing_java_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyspark")
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    monkeypatch.setenv("PATH", "/nonexistent")

    with pytest.raises(SparkUnavailableError, match=r"install one .*JAVA_HOME"):
        create_session(SparkOptions())


def test_spark_missing_pyspark_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pyspark.sql", None)

    with pytest.raises(SparkUnavailableError, match=r"pip install 'orleanspy\[spark\]'"):
        create_session(SparkOptions())


def test_cli_spark_run_unreachable_gateway_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["spark", "run", "--gateway", "127.0.0.1:1", "Analytics", "k", "report"])

    assert code == 2
    assert "cannot reach the silo gateway" in capsys.readouterr().err


def test_cli_silo_start_bad_spark_conf_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["silo", "start", "--app", "x", "--spark-conf", "nope"])

    assert code == 2
    assert "KEY=VALUE" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.integration
async def test_cli_spark_run_against_a_silo_process(silo_launcher: SiloLauncher) -> None:
    pytest.importorskip("pyspark")
    silo = await silo_launcher.start(
        "--app", "tests.spark.grains", "--spark-master", "local[1]",
        "--spark-conf", "spark.ui.enabled=false", "--spark-conf", "spark.sql.shuffle.partitions=1",
    )

    code, out, err = await run_cli_to_end(
        "spark", "run", "--gateway", silo.gateway, "--interval", "0.2",
        "Analytics", "cli", "word_counts", '["a", "b", "a"]', timeout=90,
    )
    exit_code = await silo.terminate(timeout=30)

    assert code == 0, err
    assert json.loads(out) == [{"word": "a", "count": 2}, {"word": "b", "count": 1}]
    assert "100.0%" in err and "done" in err
    assert exit_code == 0
    log = silo.log_text()
    assert "spark_session_started" in log and "spark_session_stopped" in log


def test_progress_bar_off_a_terminal_writes_a_line_while_it_stands_still() -> None:
    # One long task: the bar stays at 0 %; a log still shows the job is alive.
    from orleanspy.testing.clock import FakeClock
    from silo.spark_progress import QUIET_LINE

    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(out, tty=False, clock=clock)
    job = {"tasks_done": 0, "tasks_total": 1, "fraction": 0.0,
           "stage": "$anonfun$withThreadLocalCaptured$1 at CompletableFuture.java:1768",
           "description": "PageStats/daily.top"}
    bar.update([job])
    clock.advance(QUIET_LINE / 2)
    bar.update([job])
    assert len(out.getvalue().splitlines()) == 1  # nothing moved, not yet QUIET_LINE
    for _ in range(4):
        clock.advance(QUIET_LINE)
        bar.update([job])
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 and lines[-1].rstrip().endswith("PageStats/daily.top")
    assert "22.5s" in lines[-1]  # the elapsed time moves on
    assert not any("anonfun" in line for line in lines)
    bar.update([{**job, "stage": "collect at daily.py:12"}])  # a stage named by user code
    assert bar.last.endswith("collect at daily.py:12")
