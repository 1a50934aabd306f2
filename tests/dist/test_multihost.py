"""Every mode on two hosts with their own addresses (network namespaces, ``two_hosts``).

Each namespace is one machine of the ip_config; the launcher starts that machine's processes
there (``cluster.netns``) exactly as it would over ssh (cd, explicit environment). The sampled
mode pulls every feature row across the link; SAR and DS-MPNN train and must give the loss curve
they give on one host. Skipped where namespaces cannot be created (needs root and iproute2).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.config import ClusterConfig, DatasetConfig
from dsgraph.data.synthetic import generate
from dsgraph.partition import partition_graph
from tests.dist import jobs


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stock", [False, True], ids=["dsgraph", "stock_own_shm"])
def test_two_hosts_in_network_namespaces_pull_correct_features(tmp_path, two_hosts, stock):
    """dsgraph's DGL, and unpatched DGL with each host's own /dev/shm (``cluster.netns_shm``,
    the stock deployment of the sampled benchmark), serve every row correctly on two hosts.
    (Stock with one shared /dev/shm fails in the trainers' ``map_shared_data``: the two
    servers' segments share names, dmlc/dgl#3621.)"""
    names, ips = two_hosts
    g = generate(DatasetConfig(num_nodes=2000, feat_dim=8, num_classes=4))
    g.ndata["feat"][:, 0] = torch.arange(g.num_nodes(), dtype=torch.float32)
    part = partition_graph(g, 2, tmp_path / "parts", method="metis")
    run = tmp_path / "run"
    run.mkdir()
    torch.save(g.ndata["feat"], run / "original_feat.pt")
    ip_config = tmp_path / "ip_config.txt"
    ip_config.write_text("".join(f"{ip} 30050\n" for ip in ips))
    cluster = ClusterConfig(ip_config=str(ip_config), netns=names, netns_shm=stock)
    run_dgl_job(run, part, cluster, "tests.dist.pull_check", timeout_s=120, stock=stock)
    results = [json.loads((run / f"pull{r}.json").read_text()) for r in range(2)]
    assert sorted(r["partid"] for r in results) == [0, 1]
    for r in results:
        assert r["remote_rows"] > 0 and r["mismatched"] == 0, r


def _train(cfg: Path, out: Path, *sets: str) -> list[dict]:
    """``python -m train`` of ``cfg`` into ``out``; the epoch records."""
    console = jobs.train(cfg, out, *sets)
    assert "epoch 2:" in console  # rank 0's epoch lines reach the launcher's console
    return jobs.epochs(out)


def _ip_config(tmp_path: Path, ips: list[str]) -> Path:
    path = tmp_path / "ip_config.txt"
    path.write_text("".join(f"{ip} 30050\n" for ip in ips))
    return path


@pytest.mark.timeout(300)
def test_sar_on_two_hosts_matches_one_host(tmp_path, two_hosts):
    names, ips = two_hosts
    cfg = tmp_path / "sar.yaml"
    cfg.write_text(f"""
dataset: {{num_nodes: 800, avg_degree: 6, num_classes: 4, feat_dim: 8, cache_dir: {tmp_path}/data}}
partition: {{num_parts: 2, out_dir: {tmp_path}/parts}}
model: {{name: sage, args: {{hidden: 16}}}}
train: {{mode: sar, epochs: 3, lr: 0.02, dtype: float64, timeout_s: 150}}
""")
    jobs.partition(cfg)
    here = _train(cfg, tmp_path / "one_host")
    there = _train(cfg, tmp_path / "two_hosts", f"cluster.ip_config={_ip_config(tmp_path, ips)}",
                   f"cluster.netns={names}")
    assert [r["epoch"] for r in there] == [1, 2, 3]
    assert all(r["bytes_sent"] > 0 for r in there)  # the halo rows crossed the link
    for a, b in zip(here, there):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-9), (a, b)


@pytest.mark.timeout(300)
def test_dsmpnn_on_two_hosts_matches_one_host(tmp_path, two_hosts, darcy_two_epochs):
    names, ips = two_hosts
    one_host = darcy_two_epochs
    there = _train(one_host.config, tmp_path / "two_hosts", *one_host.sets,
                   f"cluster.ip_config={_ip_config(tmp_path, ips)}", f"cluster.netns={names}")
    assert [r["epoch"] for r in there] == [1, 2]
    for a, b in zip(jobs.epochs(one_host.path), there):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-6), (a, b)


_LISTEN = ("import socket, sys\n"
           "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
           "s.bind((sys.argv[1], 30070)); s.listen(8); print('up', flush=True)\n"
           "for _ in range(int(sys.argv[2])):\n"
           "    c, _ = s.accept(); c.sendall(sys.argv[1].encode()); c.close()\n")
_CONNECT = ("import socket, sys\n"
            "c = socket.create_connection((sys.argv[1], 30070), timeout=10)\n"
            "print(c.recv(64).decode())\n")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("count,rate", [(3, None), (4, "1gbit")])
def test_more_hosts_on_a_bridge_reach_each_other(count, rate):
    """``emulated_hosts(count=N)`` for N > 2 (a bridge in a namespace of its own): every host
    has its link named LINK and its own address, reaches every other host over TCP (also
    throttled), and nothing is left behind on exit."""
    import subprocess
    import sys

    from dsgraph.cluster.netns import LINK, HostsUnavailable, emulated_hosts, host_shm
    try:
        hosts = emulated_hosts(rate=rate, count=count)
        names, ips = hosts.__enter__()
    except HostsUnavailable as exc:
        pytest.skip(str(exc))
    try:
        assert len(set(names)) == len(set(ips)) == count
        for ns, ip in zip(names, ips):
            shown = subprocess.run(["ip", "-n", ns, "-4", "addr", "show", LINK],
                                   capture_output=True, text=True, check=True).stdout
            assert f"{ip}/24" in shown
        for ns, ip in zip(names, ips):
            peers = [p for p in names if p != ns]
            server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", _LISTEN,
                                       ip, str(len(peers))], stdout=subprocess.PIPE, text=True)
            try:
                assert server.stdout.readline().strip() == "up"
                for peer in peers:
                    got = subprocess.run(["ip", "netns", "exec", peer, sys.executable, "-c",
                                          _CONNECT, ip], capture_output=True, text=True,
                                         timeout=20)
                    assert got.stdout.strip() == ip, (peer, ip, got.stderr)
                assert server.wait(timeout=10) == 0
            finally:
                if server.poll() is None:
                    server.kill()
                    server.wait()
    finally:
        hosts.__exit__(None, None, None)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    tag = names[0][3:-1]
    assert f"dsg{tag}" not in listed
    assert not any(host_shm(ns).exists() for ns in names)
