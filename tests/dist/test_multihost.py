"""Two hosts with their own addresses: network namespaces joined by a veth link.

Each namespace is one machine of the ip_config; the launcher starts its server and trainer there
(``cluster.netns``) exactly as it would over ssh (cd, explicit environment). Skipped where the
machine does not allow creating namespaces (needs root and iproute2).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest
import torch

from dsgraph.cluster.dgl_job import run_dgl_job
from dsgraph.config import ClusterConfig, DatasetConfig
from dsgraph.data.synthetic import generate
from dsgraph.partition import partition_graph


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag = uuid.uuid4().hex[:6]
    names = [f"dsg{tag}a", f"dsg{tag}b"]
    subnet = f"10.{int(tag[:2], 16) % 200 + 20}.{int(tag[2:4], 16)}"
    ips = [f"{subnet}.1", f"{subnet}.2"]
    try:
        for ns in names:
            if _ip("netns", "add", ns).returncode != 0:
                pytest.skip("creating network namespaces is not permitted here")
        veth = [f"v{tag}a", f"v{tag}b"]
        steps = [("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])]
        for ns, dev, ip in zip(names, veth, ips):
            steps += [("link", "set", dev, "netns", ns),
                      ("-n", ns, "addr", "add", f"{ip}/24", "dev", dev),
                      ("-n", ns, "link", "set", dev, "up"),
                      ("-n", ns, "link", "set", "lo", "up"),
                      # DGL picks a client's address from the route to a non-local address
                      ("-n", ns, "route", "add", "default", "dev", dev)]
        for step in steps:
            res = _ip(*step)
            if res.returncode != 0:
                pytest.skip(f"ip {' '.join(step)} failed: {res.stderr.strip()}")
        yield names, ips
    finally:
        for ns in names:
            _ip("netns", "del", ns)


@pytest.mark.timeout(180)
def test_two_hosts_in_network_namespaces_pull_correct_features(tmp_path, two_hosts):
    names, ips = two_hosts
    g = generate(DatasetConfig(num_nodes=2000, feat_dim=8, num_classes=4))
    g.ndata["feat"][:, 0] = torch.arange(g.num_nodes(), dtype=torch.float32)
    part = partition_graph(g, 2, tmp_path / "parts", method="metis")
    run = tmp_path / "run"
    run.mkdir()
    torch.save(g.ndata["feat"], run / "original_feat.pt")
    ip_config = tmp_path / "ip_config.txt"
    ip_config.write_text("".join(f"{ip} 30050\n" for ip in ips))
    cluster = ClusterConfig(ip_config=str(ip_config), netns=names, timeout_s=120)
    run_dgl_job(run, part, cluster, "tests.dist.pull_check")
    results = [json.loads((run / f"pull{r}.json").read_text()) for r in range(2)]
    assert sorted(r["partid"] for r in results) == [0, 1]
    for r in results:
        assert r["remote_rows"] > 0 and r["mismatched"] == 0, r
