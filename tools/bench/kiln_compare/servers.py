"""Servers a section starts for itself on 127.0.0.1 (a Redis that keeps nothing on disk, an nginx
serving WebDAV from a folder), each on a free port, and what the sections ask of them."""
import os
import shutil
import subprocess
import time


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port, seconds=10):
    import socket
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


def start_redis(work):
    """A redis-server on a free port of 127.0.0.1 that keeps nothing on disk, or None."""
    binary = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None)
    if not binary:
        return None, None
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", work],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_port(port):
        proc.kill()
        return None, None
    return proc, port


def start_nginx(work):
    """nginx serving WebDAV PUT/GET from a folder, on a free port of 127.0.0.1, or None."""
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if not binary:
        return None, None
    port = free_port()
    os.makedirs(os.path.join(work, "store"), exist_ok=True)
    conf = os.path.join(work, "nginx.conf")
    temps = "".join(f"  {t}_temp_path {work}/{t};\n" for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    open(conf, "w").write(f"""daemon off;\nmaster_process off;\nworker_processes 1;\npid {work}/nginx.pid;
error_log {work}/error.log warn;\nevents {{ worker_connections 1024; }}\nhttp {{\n  access_log off;\n{temps}
  client_max_body_size 0;\n  server {{\n    listen 127.0.0.1:{port};\n    root {work}/store;
    location / {{ dav_methods PUT; create_full_put_path on; }}\n  }}\n}}\n""")
    proc = subprocess.Popen([binary, "-p", work, "-c", conf, "-e", os.path.join(work, "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_port(port):
        proc.kill()
        return None, None
    return proc, port


def redis_flush(port):
    import socket
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"*1\r\n$8\r\nFLUSHALL\r\n")
        sock.recv(64)
