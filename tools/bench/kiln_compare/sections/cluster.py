"""16 simulated nodes (processes with their own caches) warming every bundled op
at once: with no shared tier, a Redis tier and an HTTP tier, next to one node;
then 16 to 1,000 simulated nodes (threads with their own stores) cold-starting a
job's artifacts against 1, 3 and 6 Redis shards and nginx: compiles per key,
bytes per server, time to ready, lease load (tools/bench/cluster_sim.py)
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from ..harness import add, BENCH, bundled_specs, KILN, log, stats_ms
from ..servers import redis_flush, start_nginx, start_redis


def cold_start(work, tag, nodes, remote):
    """`nodes` kiln processes, each with an empty cache folder, warming every bundled op at once:
    (wall seconds, compiles per op, failures)."""
    dirs = [os.path.join(work, f"{tag}-{i}") for i in range(nodes)]
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    start = time.monotonic()
    procs = [subprocess.Popen([KILN, "--cache-dir", d, "--remote", remote, "warm", "-j", "1", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for d in dirs]
    outs = [p.communicate() for p in procs]
    wall = time.monotonic() - start
    compiles, failures = {}, 0
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            failures += 1
        for row in json.loads(out or "[]"):
            compiles[row["op"]] = compiles.get(row["op"], 0) + (row.get("source") == "compiled")
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    return wall, compiles, failures


def section(a, work):
    """16 simulated nodes (separate processes, their own cache folders) starting cold together."""
    nodes = 16
    redis, redis_port = start_redis(work)
    nginx_dir = os.path.join(work, "nginx")
    os.makedirs(nginx_dir)
    nginx, nginx_port = start_nginx(nginx_dir)
    if not redis:
        add("cluster", "cold start of a cluster", None, "", missing="redis-server is not installed (scripts/setup)")
        return
    try:
        runs = 2 if a.quick else 3
        results = {}
        tiers = [("one node alone, no shared tier", 1, ""), (f"{nodes} nodes, no shared tier", nodes, ""),
                 (f"{nodes} nodes sharing a Redis tier", nodes, f"redis://127.0.0.1:{redis_port}")]
        if nginx:
            tiers.append((f"{nodes} nodes sharing an HTTP tier (nginx WebDAV; no leases)", nodes, f"http://127.0.0.1:{nginx_port}/kiln"))
        for name, n, remote in tiers:
            walls, compiles, failures = [], {}, 0
            for i in range(runs):
                redis_flush(redis_port)
                shutil.rmtree(os.path.join(nginx_dir, "store", "kiln"), ignore_errors=True)
                w, c, f = cold_start(work, f"c{len(results)}-{i}", n, remote)
                walls.append(w * 1000)
                compiles = c
                failures += f
            results[name] = (stats_ms(walls), compiles, failures)
            log(f"compare: cluster: {name}: {statistics.median(walls) / 1000:.2f} s, {sum(compiles.values())} compiles")
        one = results[tiers[0][0]][0]
        ops = len(bundled_specs())
        for name, _, remote in tiers[1:]:
            st, compiles, failures = results[name]
            total = sum(compiles.values())
            most = max(compiles.values()) if compiles else 0
            note = f"{total} compiles for {ops} keys (at most {most} per key){'; ' + str(failures) + ' node runs failed' if failures else ''}"
            add("cluster", f"cold start: {name}, every bundled op (kiln warm -j1 each); wall time of the whole cluster", st,
                f"{nodes} x {KILN} --cache-dir DIR --remote '{remote}' warm -j1", one,
                "one node alone (the same command, one process)", note=note)
    finally:
        redis.kill()
        if nginx:
            nginx.kill()
    # The same at scale, with a job's artifacts (a PCH-sized one, Triton-group-sized ones).
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    import cluster_sim
    cluster_sim.section(add, work, a.quick)
