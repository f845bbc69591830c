#!/usr/bin/env python3
"""The cluster tier at up to 1,000 simulated nodes, against real servers this tool starts.

usage: tools/bench/cluster_sim.py [--quick] [--nodes 16,64,256,1000] [--shards 1,3,6]
                                  [--concurrency 64] [--json FILE] [--markdown FILE]

What a node is: a thread of build/bin/kiln_cluster_sim (tools/bench/cluster_sim.cpp) with its own
local store (a real cache::Store, in a folder on /dev/shm removed once the node is ready) and its
own remote tiers (connections, breakers, leases). `--concurrency` nodes run at once (64 by
default), the rest queued: all N start at t=0 and each is timed from when it runs, so "time to
ready" is a node's own start-up, not its wait in the queue. One job's worth of artifacts, scaled
down 100x in bytes so that 1,000 nodes fit in a few minutes on 2 cores (a chunk likewise, so the
count of chunks and their spread is that of the real sizes):
  13 bundled ops            400 B each (real: ~40 KB host libraries), compile 20 ms (scaled)
  1 torch-PCH-sized         1.73 MB (real: 173 MB), chunks of 10,486 B (real: 1 MiB), compile 300 ms
  300 Triton-group-sized    2 KB each (real: ~200 KB), compile 10 ms
Servers: 1, 3 and 6 redis-servers as shards of one tier (leases, chunks spread by rendezvous),
and nginx (WebDAV; an HTTP tier has no leases). Per N it reports compiles per key, requests and
bytes each server served (read from the servers: INFO stats, nginx's access log), the busiest
server's share, time to ready (p50, p99, max) and the lease requests per second; then the lease
alone: W nodes waiting on one lease held 10 s, watched (woken by the release) or polling.

As a section of tools/bench/compare: `import cluster_sim; cluster_sim.section(add, work, quick)`
(see section() below).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCALE = 100  # bytes of every artifact and chunk divided by this
JOB = dict(ops=13, op_bytes=40_000 // SCALE, pch_bytes=173_000_000 // SCALE, chunk_bytes=(1 << 20) // SCALE,
           chunk_threshold=(4 << 20) // SCALE, triton=300, triton_bytes=200_000 // SCALE)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


class Redis:
    """A redis-server on a free port that keeps nothing on disk; asked with the RESP protocol."""

    def __init__(self, work):
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.port = free_port()
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", work, "--maxclients", "10000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_port(self.port):
            raise RuntimeError(f"redis-server did not start on {self.port}")
        self.url = f"redis://127.0.0.1:{self.port}"

    def command(self, *args):
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(f"*{len(args)}\r\n".encode() + b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in args))
            data = b""
            while True:
                chunk = s.recv(1 << 16)
                data += chunk
                if not chunk or (data.startswith(b"$") and len(data) >= int(data[1:data.index(b"\r\n")]) + data.index(b"\r\n") + 4) \
                        or (data[:1] in b"+-:" and data.endswith(b"\r\n")):
                    return data.decode(errors="replace")

    def reset(self):
        self.command("FLUSHALL")
        self.command("CONFIG", "RESETSTAT")

    def served(self):
        """(requests, bytes sent) since the last reset."""
        info = dict(line.split(":", 1) for line in self.command("INFO", "stats").splitlines() if ":" in line)
        return int(info["total_commands_processed"]), int(info["total_net_output_bytes"])

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Nginx:
    """nginx serving WebDAV PUT/GET from a folder, logging each request's bytes sent."""

    def __init__(self, work):
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        self.work, self.port = work, free_port()
        os.makedirs(os.path.join(work, "store"), exist_ok=True)
        temps = "".join(f"  {t}_temp_path {work}/{t};\n" for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(os.path.join(work, "nginx.conf"), "w") as f:
            f.write(f"""daemon off;\nmaster_process off;\nworker_processes 1;\npid {work}/nginx.pid;
error_log {work}/error.log warn;\nevents {{ worker_connections 4096; }}\nhttp {{
  log_format sim '$status $bytes_sent';\n  access_log {work}/access.log sim;\n{temps}
  client_max_body_size 0;\n  server {{\n    listen 127.0.0.1:{self.port};\n    root {work}/store;
    location / {{ dav_methods PUT; create_full_put_path on; }}\n  }}\n}}\n""")
        self.proc = subprocess.Popen([binary, "-p", work, "-c", os.path.join(work, "nginx.conf"), "-e", os.path.join(work, "error.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_port(self.port):
            raise RuntimeError(f"nginx did not start on {self.port}")
        self.url = f"http://127.0.0.1:{self.port}/kiln"

    def reset(self):
        shutil.rmtree(os.path.join(self.work, "store", "kiln"), ignore_errors=True)
        open(os.path.join(self.work, "access.log"), "w").close()  # nginx appends at its offset: O_APPEND

    def served(self):
        lines = open(os.path.join(self.work, "access.log")).read().split()
        return len(lines) // 2, sum(int(b) for b in lines[1::2])

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def sim_binary():
    build = os.environ.get("KILN_BUILD_DIR", os.path.join(ROOT, "build"))
    path = os.path.join(build if os.path.isabs(build) else os.path.join(ROOT, build), "bin", "kiln_cluster_sim")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is not built: cmake --build build --target kiln_cluster_sim")
    return path


def run_sim(args, work):
    cmd = [sim_binary(), "--work", work] + [str(a) for a in args]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def cold_start(servers, tier, nodes, concurrency, work, chunks=True):
    for s in servers:
        s.reset()
    threshold = JOB["chunk_threshold"] if chunks else 1 << 40
    job = ["--ops", JOB["ops"], "--op-bytes", JOB["op_bytes"], "--pch-bytes", JOB["pch_bytes"], "--chunk-bytes", JOB["chunk_bytes"],
           "--chunk-threshold", threshold, "--triton", JOB["triton"], "--triton-bytes", JOB["triton_bytes"]]
    out = run_sim(["--tiers", tier, "--nodes", nodes, "--concurrency", concurrency] + job, work)
    served = [s.served() for s in servers]
    total_bytes = sum(b for _, b in served) or 1
    total_requests = sum(r for r, _ in served) or 1
    out["requests_per_server"] = [r for r, _ in served]
    out["bytes_per_server"] = [b for _, b in served]
    out["busiest_bytes_share"] = max(b for _, b in served) / total_bytes
    out["busiest_requests_share"] = max(r for r, _ in served) / total_requests
    out["lease_requests_per_s"] = out["lease_requests"] / out["wall_s"]
    return out


def lease_alone(redis, waiters, poll, work, hold_ms=10000):
    """W waiters on one lease held `hold_ms`: the requests the server answers per second in the
    second half of the hold, once every waiter has made its first look (subscribe, take, look)."""
    redis.reset()
    cmd = [sim_binary(), "--work", work, "--tiers", redis.url, "--lease-waiters", str(waiters), "--hold-ms", str(hold_ms)]
    proc = subprocess.Popen(cmd + (["--poll"] if poll else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    time.sleep(hold_ms / 2000)
    first, t1 = redis.served()[0], time.monotonic()
    time.sleep(max(0.0, start + hold_ms / 1000 - 0.3 - time.monotonic()))
    second, t2 = redis.served()[0], time.monotonic()
    out_text, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    out = json.loads(out_text.strip().splitlines()[-1])
    out["steady_requests_per_s"] = (second - first - 1) / (t2 - t1)  # less the INFO that sampled it
    out["server_requests"] = redis.served()[0]
    return out


def measure(nodes_list, shards_list, concurrency, quick, work, chunks=True, lease=True, nginx=True):
    results = {"job": JOB, "scale": SCALE, "concurrency": concurrency, "cold_start": [], "nginx": [], "lease": []}
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else work
    node_dir = tempfile.mkdtemp(prefix="kiln-cluster-sim-", dir=shm)
    try:
        for shards in shards_list:
            servers = [Redis(work) for _ in range(shards)]
            try:
                tier = ",".join(s.url for s in servers)
                for n in nodes_list:
                    start = time.monotonic()
                    r = cold_start(servers, tier, n, concurrency, node_dir, chunks)
                    r.update(tier=f"redis x{shards}" + ("" if chunks else ", large artifacts whole (no chunks)"), shards=shards)
                    results["cold_start"].append(r)
                    log(f"cluster_sim: redis x{shards}, {n} nodes: {r['compiles']} compiles for {r['keys']} keys, busiest server "
                        f"{r['busiest_bytes_share']:.0%} of bytes, ready p50 {r['ready_ms_p50'] / 1000:.2f} s, "
                        f"max {r['ready_ms_max'] / 1000:.2f} s ({time.monotonic() - start:.0f} s)")
            finally:
                for s in servers:
                    s.stop()
        if nginx and (shutil.which("nginx") or os.access("/usr/sbin/nginx", os.X_OK)):
            nginx_dir = os.path.join(work, "nginx")
            os.makedirs(nginx_dir, exist_ok=True)
            nginx = Nginx(nginx_dir)
            try:
                for n in [n for n in nodes_list if n <= (64 if quick else 256)]:
                    r = cold_start([nginx], nginx.url, n, concurrency, node_dir)
                    r.update(tier="nginx x1 (HTTP, no leases)", shards=1)
                    results["nginx"].append(r)
                    log(f"cluster_sim: nginx, {n} nodes: {r['compiles']} compiles for {r['keys']} keys")
            finally:
                nginx.stop()
        redis = Redis(work) if lease else None
        try:
            for w in [] if not lease else [w for w in (16, 64, 256, 1000) if not quick or w <= 256]:
                for poll in (True, False):
                    r = lease_alone(redis, w, poll, node_dir)
                    results["lease"].append(r)
                    log(f"cluster_sim: {w} waiters, {'polling' if poll else 'watching'}: {r['steady_requests_per_s']:.0f} requests/s "
                        f"at the server in the second half of the hold")
        finally:
            if redis:
                redis.stop()
    finally:
        shutil.rmtree(node_dir, ignore_errors=True)
    return results


def markdown(results):
    out = ["| tier | nodes | compiles / keys (max per key) | requests per server | MB per server | busiest share of bytes | "
           "time to ready p50 / p99 / max | lease requests/s | wall |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results["cold_start"] + results["nginx"]:
        out.append(f"| {r['tier']} | {r['nodes']} | {r['compiles']} / {r['keys']} ({r['max_compiles_per_key']}) | "
                   f"{', '.join(str(x) for x in r['requests_per_server'])} | "
                   f"{', '.join(f'{b / 1e6:.1f}' for b in r['bytes_per_server'])} | {r['busiest_bytes_share']:.1%} | "
                   f"{r['ready_ms_p50'] / 1000:.2f} / {r['ready_ms_p99'] / 1000:.2f} / {r['ready_ms_max'] / 1000:.2f} s | "
                   f"{r['lease_requests_per_s']:.0f} | {r['wall_s']:.1f} s |")
    out += ["", "| waiters on one lease (held 10 s) | polling: requests/s at the server | watching: requests/s | "
            "requests in all, polling / watching | waiters that got it, polling / watching | last waiter ready after the release, "
            "polling / watching |", "|---|---|---|---|---|---|"]
    by = {}
    if not results["lease"]:
        return "\n".join(out[:-3])
    for r in results["lease"]:
        by.setdefault(r["waiters"], {})[r["poll"]] = r
    for w, pair in sorted(by.items()):
        p, x = pair.get(True), pair.get(False)
        out.append(f"| {w} | {p['steady_requests_per_s']:.0f} | {x['steady_requests_per_s']:.0f} | {p['server_requests']} / "
                   f"{x['server_requests']} | {p['found'] + p['taken']} / {x['found'] + x['taken']} | "
                   f"{p['after_release_ms_max']:.0f} / {x['after_release_ms_max']:.0f} ms |")
    return "\n".join(out)


# The model's assumptions (docs/CLUSTER-SCALE.md): a real network, not this machine's loopback.
MODEL = dict(
    server_gbit=25,               # each Redis shard's NIC
    node_gbit=25,                 # each node's front-end NIC
    rtt_ms=0.1,                   # node to shard, one pod
    shard_requests_per_s=100_000,  # one Redis process serving small GETs (single-threaded)
    parallel_chunks=8,            # RemoteOptions::chunk_parallel
)


def model(results, nodes_list=(1000, 10000)):
    """Projects the measured per-node requests and bytes and the measured spread over shards to
    N nodes on the network MODEL describes: the last node's time to ready, bounded by the
    busiest shard's NIC, its request rate, and a node's own NIC and round trips."""
    m = MODEL
    server_bps, node_bps = m["server_gbit"] * 1e9 / 8, m["node_gbit"] * 1e9 / 8
    rows = ["| shards | nodes | bytes per node (unscaled) | busiest shard: share of bytes (measured) | its bytes | "
            "its NIC time | its requests/s time | one node alone | last node ready (projected) | last / one |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    biggest = {}
    for r in results["cold_start"]:
        if r["nodes"] >= biggest.get(r["shards"], {}).get("nodes", 0):
            biggest[r["shards"]] = r
    for shards, r in sorted(biggest.items()):
        per_node_bytes = sum(r["bytes_per_server"]) / r["nodes"] * SCALE
        per_node_requests = sum(r["requests_per_server"]) / r["nodes"]
        round_trips = 2 * r["keys"] + JOB["pch_bytes"] / JOB["chunk_bytes"] / m["parallel_chunks"]
        one = per_node_bytes / min(node_bps, shards * server_bps) + round_trips * m["rtt_ms"] / 1000
        for n in nodes_list:
            busiest = r["busiest_bytes_share"] * n * per_node_bytes
            t_nic = busiest / server_bps
            t_req = r["busiest_requests_share"] * n * per_node_requests / m["shard_requests_per_s"]
            last = max(t_nic, t_req, one)
            rows.append(f"| {shards} | {n:,} | {per_node_bytes / 1e6:.0f} MB | {r['busiest_bytes_share']:.1%} | {busiest / 1e9:.0f} GB | "
                        f"{t_nic:.1f} s | {t_req:.1f} s | {one:.2f} s | {last:.1f} s | {last / one:.0f}x |")
    return "\n".join(rows)


def section(add, work, quick=False):
    """tools/bench/compare's `cluster` section: `import cluster_sim` (tools/bench is compare's folder)
    and call this with compare's add(); it adds one row per cold start, its figures in the note."""
    results = measure([16, 64, 256] if quick else [16, 64, 256, 1000], [1, 3, 6], 64, quick, work)
    for r in results["cold_start"] + results["nginx"]:
        ms = r["ready_ms_p50"]
        add("cluster", f"{r['nodes']} simulated nodes cold-starting one job (13 ops, a PCH, 300 Triton groups; bytes / {SCALE}) "
                       f"against {r['tier']}: per-node time to ready", {"median_ms": ms, "min_ms": ms, "max_ms": r["ready_ms_max"], "n": r["nodes"]},
            f"tools/bench/cluster_sim.py (kiln_cluster_sim --nodes {r['nodes']} --concurrency {r['concurrency']})",
            note=f"{r['compiles']} compiles for {r['keys']} keys (max {r['max_compiles_per_key']} per key); busiest server "
                 f"{r['busiest_bytes_share']:.0%} of bytes; p99 {r['ready_ms_p99'] / 1000:.2f} s; lease requests "
                 f"{r['lease_requests_per_s']:.0f}/s")
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="N up to 256, lease waiters up to 256")
    p.add_argument("--nodes", default="16,64,256,1000")
    p.add_argument("--shards", default="1,3,6")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--json", default=os.path.join(ROOT, "build", "bench", "cluster_sim.json"))
    p.add_argument("--markdown", help="also write the tables to this file")
    p.add_argument("--no-chunks", action="store_true", help="large artifacts whole, on one shard each (what chunks save)")
    p.add_argument("--only-cold-start", action="store_true", help="no nginx runs, no lease-alone runs")
    a = p.parse_args()
    nodes = [int(n) for n in a.nodes.split(",")]
    if a.quick:
        nodes = [n for n in nodes if n <= 256]
    with tempfile.TemporaryDirectory(prefix="kiln-cluster-") as work:
        start = time.monotonic()
        results = measure(nodes, [int(s) for s in a.shards.split(",")], a.concurrency, a.quick, work, chunks=not a.no_chunks,
                          lease=not a.only_cold_start, nginx=not a.only_cold_start)
        results["seconds"] = time.monotonic() - start
        results["machine"] = f"{os.cpu_count()} cores, {os.uname().release}"
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(results, f, indent=1)
    table = markdown(results) + "\n\nProjected (assumptions: " + ", ".join(f"{k}={v}" for k, v in MODEL.items()) + "):\n\n" + model(results)
    print(table)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(table + "\n")
    log(f"cluster_sim: {results['seconds']:.0f} s; figures in {a.json}")


if __name__ == "__main__":
    main()
