"""A clean console: DGL's and gloo's runtime chatter stays in the process logs, and numbers are
shown one way (by the metric's name) in the epoch lines and the end-of-run table."""
from __future__ import annotations

import os
import re
import sys

import pytest

from dsgraph.cluster.chatter import CHATTER, ChatterFilter, is_chatter, literal_head, quiet_env
from dsgraph.metrics import MetricsLog, format_metric, print_summary, write_summary

# One line of each kind the declared patterns are for, as the processes print them.
SAMPLES = (
    "DGL backend not selected or invalid.  Assuming PyTorch for now.",
    'Setting the default backend to "pytorch". You can change it in the ~/.dgl/config.json file '
    "or export the DGLBACKEND environment variable.  Valid options are: pytorch, mxnet, "
    "tensorflow (all lowercase)",
    "Initialize the distributed services with graphbolt: False",
    "Client [5300] waits on 127.0.0.1:50005",
    "Machine (0) group (0) client (0) connect to server successfuly!",
    "Client[0] in group[0] is exiting...",
    "Warning! Interface: ifb0 ",
    "IP address not available for interface.",
    "Server is waiting for connections on [127.0.0.1:42624]...",
    "Server is exiting...",
    "Server (1) shutdown.",
    "load graph_dsg13058p1182f2_m0",
    "Start to create specified graph formats which may take non-trivial time.",
    "Finished creating specified graph formats: ('csc', 'coo')",
    "start graph service on server 0 for part 0",
    "User pressed Ctrl+C, Exiting",
    "LIBXSMM_VERSION: unconfigured (0)",
    "LIBXSMM_TARGET: cpx [AMD EPYC]",
    "Registry and code: 13 MB + 16 KB (meltw=1)",
    "Uptime: 12.345 s",
    "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - "
    "Address already in use).",
    "[W ProcessGroupGloo.cpp:721] Warning: Unable to resolve hostname to a (local) address. "
    "Using the loopback address as fallback. Manually set the network interface to bind to with "
    "GLOO_SOCKET_IFNAME. (function operator())",
    "[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1",
)
# What must reach the console whatever the patterns say.
KEPT = (
    "epoch 1: loss 4.6686, train_acc 0.0700, samples_per_s 9,580, epoch_s 0.29",
    "error: failed to load graph_x: no such file",
    "dsgraph.native:0: NativeKernelsWarning: C kernels unavailable (no C compiler); using the "
    "slower pure-torch path (set DSGRAPH_NATIVE=0 to silence this when deliberate)",
    "/x/dgl/distributed/dist_dataloader.py:12: DGLWarning: a warning from DGL about the data",
    "dgl._ffi.base.DGLError: [12:00:01] /opt/dgl/src/rpc/rpc.cc:100: Check failed: x",
    "Server is exiting because of an error",  # not the listed line: shown
)


def _filtered(data: bytes, chunk: int) -> bytes:
    f = ChatterFilter()
    return b"".join(f.feed(data[i:i + chunk]) for i in range(0, len(data), chunk)) + f.flush()


def test_every_declared_pattern_has_a_distinctive_head_and_matches_its_line():
    assert all(len(literal_head(p)) >= 4 for p in CHATTER), [literal_head(p) for p in CHATTER]
    assert all(is_chatter(s) for s in SAMPLES), [s for s in SAMPLES if not is_chatter(s)]
    assert not any(is_chatter(s) for s in KEPT), [s for s in KEPT if is_chatter(s)]


@pytest.mark.parametrize("chunk", [1, 5, 64, 65536])
def test_chatter_is_dropped_and_everything_else_passes(chunk):
    bar = b"\rtrain:  40%|####      | 8/20 [00:01<00:01, 9.44step/s, loss=1.5535]"
    stream = b"".join(s.encode() + b"\n" for s in SAMPLES[:6]) + bar + \
        b"".join(s.encode() + b"\n" for s in KEPT) + bar + \
        b"Client[1] in group[0] is exiting...\n" + b"".join(s.encode() + b"\n" for s in SAMPLES[6:])
    kept = b"".join(s.encode() + b"\n" for s in KEPT)
    assert _filtered(stream, chunk) == bar + kept + bar + b"\n"  # the bar's line still ends


@pytest.mark.parametrize("chunk", [1, 2, 3, 4096])
def test_crlf_line_ends_leave_no_blank_lines(chunk):
    stream = b"epoch 1\r\nClient[0] in group[0] is exiting...\r\nepoch 2\r\n\r\n"
    assert _filtered(stream, chunk) == b"epoch 1\r\nepoch 2\r\n\r\n"


def test_a_progress_bar_is_shown_before_its_line_ends():
    f = ChatterFilter()
    assert f.feed(b"\rtrain:  40%|####") == b"\rtrain:  40%|####"
    assert f.feed(b"   | 8/20 [00:01<00:01]") == b"   | 8/20 [00:01<00:01]"
    assert f.feed(b"\rInitialize the dist") == b"\r"  # may be chatter: held until its line ends
    assert f.feed(b"ributed services with graphbolt: False\n") == b""
    assert f.feed(b"Initialize the model\n") == b"Initialize the model\n"
    assert f.feed(b"Serv") == b""
    assert f.flush() == b"Serv"  # an unfinished line that is no chatter is shown at the end


def test_job_processes_get_dgls_backend_named():
    env = quiet_env({})
    assert env == {"DGLBACKEND": "pytorch"}
    assert quiet_env({"DGLBACKEND": "tensorflow"}) == {"DGLBACKEND": "tensorflow"}  # the user's


@pytest.mark.parametrize("key, value, shown", [
    ("samples_per_s", 19712.49, "19,712"), ("seeds_s", 6393.6579, "6,394"),
    ("edges_s", 12.0, "12"), ("remote_feature_bytes", 146800, "146,800"),
    ("bytes_sent", 1.5e9, "1,500,000,000"), ("epoch_s", 0.29431, "0.29"),
    ("wall_s", 15.7577, "15.76"), ("peak_rss_mb", 605.1172, "605.1"),
    ("job_memory_mb", 1391.4, "1391.4"), ("loss", 4.66861, "4.6686"),
    ("val_acc", 0.8385, "0.8385"), ("test_rmse", 2.5e-6, "2.50e-06"), ("loss", 0.0, "0.0000"),
    ("epochs", 5, "5"), ("rpc_sample_requests", 1200, "1,200"), ("val_acc", None, "-"),
    ("mode", "sampled", "sampled"), ("native_kernels", True, "true"),
])
def test_numbers_are_formatted_by_the_metrics_name(key, value, shown):
    assert format_metric(key, value) == shown


def test_the_end_of_run_table_uses_one_format(tmp_path, capsys):
    log = MetricsLog(tmp_path)
    for epoch, rate in ((1, 9580.0676), (2, 13912.3)):
        log.epoch({"epoch": epoch, "loss": 1.0 / epoch, "train_acc": 0.5, "val_acc": 0.25,
                   "epoch_s": 0.2943, "samples_per_s": rate, "remote_feature_bytes": 146800})
    write_summary(tmp_path, {"test_acc": 0.8295, "epochs": 2, "wall_s": 15.7577,
                             "peak_rss_mb": 605.1172, "job_memory_mb": 1391.4})
    print_summary(tmp_path)
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["1", "1.0000", "0.5000", "0.2500", "0.29", "9,580", "146,800"]
    assert out[2].split()[5] == "13,912"
    assert len({len(line) for line in out[:3]}) == 1  # columns line up under their names
    assert out[3] == ("final: test_acc=0.8295, epochs=2, wall_s=15.76, peak_rss_mb=605.1, "
                      "job_memory_mb=1391.4")
    assert not re.search(r"\d\.\d+e[+-]\d", "\n".join(out))


@pytest.mark.timeout(60)
def test_an_echoed_process_chatter_stays_in_its_log(tmp_path, capfd):
    from dsgraph.cluster.supervise import Supervisor

    script = ("import sys; print('Initialize the distributed services with graphbolt: False'); "
              "print('epoch 1: loss 0.5000'); "
              "sys.stderr.write('Client[0] in group[0] is exiting...\\n')")
    with Supervisor(tmp_path, timeout_s=30, reaper=False) as sup:
        sup.spawn("trainer0", [sys.executable, "-c", script],
                  {**os.environ, "PYTHONUNBUFFERED": "1"}, echo=True)
        sup.wait()
    err = capfd.readouterr().err
    assert "epoch 1: loss 0.5000" in err and "graphbolt" not in err and "exiting" not in err
    log = (tmp_path / "trainer0.log").read_text()
    assert "graphbolt: False" in log and "Client[0] in group[0] is exiting..." in log
