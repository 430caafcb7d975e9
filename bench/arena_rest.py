"""What the benchmark scripts share: a REST call to an `arena serve` (JSON answers), and the
server's start on a free port."""
import json
import subprocess
import urllib.error
import urllib.request


def request(base, method, path, token=None, body=None, content_type="application/json"):
    """(status, parsed JSON) of one call; `body` is bytes."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(base + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def start_server(args, log_path):
    """Starts `arena serve` (its `args` include `--bind 127.0.0.1:0`) logging to `log_path`;
    returns (process, base URL) once it listens, or exits saying where the log is."""
    server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(log_path, "w"), text=True)
    for line in server.stdout:
        if line.startswith("arena serve: listening on http://"):
            return server, "http://" + line.split("http://", 1)[1].split()[0]
    server.wait()
    raise SystemExit(f"the server did not start; see {log_path}")
