"""Review server over HTTP against the real CLI process: path safety, read-only, ranges, bind
address, catalog."""
from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from urllib.parse import urlparse

import pytest

from embodied_rl.review.cli import build_parser, main
from tests.browser_support import make_run_with_escape_links, start_cli_server, stop

VIDEO = "/files/0/video/train/step_000001/worker0_stage0.mp4"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_run_with_escape_links(tmp_path_factory.mktemp("review_srv"))


@pytest.fixture(scope="module")
def server(run_dir):
    proc, url = start_cli_server([run_dir])
    yield urlparse(url)
    stop(proc)


def _get(server, path: str, method: str = "GET", headers: dict | None = None):
    """Raw request: http.client sends the path byte-for-byte (no '..' normalisation)."""
    conn = http.client.HTTPConnection(server.hostname, server.port, timeout=10)
    conn.request(method, path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp, body


def test_default_bind_is_loopback(server):
    assert build_parser().parse_args(["runs/x"]).host == "127.0.0.1"
    assert server.hostname == "127.0.0.1"  # the address the CLI really bound (getsockname)


@pytest.mark.parametrize("path", [
    "/files/0/../outside/secret.json",
    "/files/0/../../outside/secret.json",
    "/files/0/video/../../outside/secret.json",
    "/files/0/%2e%2e/%2e%2e/outside/secret.json",
    "/files/0/%2e%2e%2f%2e%2e%2foutside%2fsecret.json",
    "/files/0/..%2f..%2foutside%2fsecret.json",
    "/files/0/%252e%252e%252f%252e%252e%252foutside%252fsecret.json",
    "/files/0//etc/passwd",
    "/files/0/%2fetc%2fpasswd",
    "/files/0/~/.bashrc",
    "/files/0/video/train/step_000001/evil.json",       # symlink to a file outside
    "/files/0/video/train/step_000009/secret.json",     # symlinked directory outside
    "/files/0/video\\..\\..\\outside\\secret.json",
    "/files/0/video/train/step_000001/worker0_stage0.mp4%00.json",
    "/files/1/config.yaml",                              # unknown run id
    "/static/../../../../etc/passwd",
    "/static/%2e%2e/%2e%2e/server.py",
])
def test_outside_paths_refused(server, path):
    resp, body = _get(server, path)
    assert resp.status in (400, 403, 404), (path, resp.status)
    assert b"TOPSECRET" not in body and b"root:" not in body


def test_inside_files_served_with_ranges(server, run_dir):
    resp, body = _get(server, VIDEO)
    size = (run_dir / VIDEO.removeprefix("/files/0/")).stat().st_size
    assert resp.status == 200 and resp.getheader("content-type") == "video/mp4" and len(body) == size
    assert resp.getheader("accept-ranges") == "bytes"
    resp, body = _get(server, VIDEO, headers={"Range": "bytes=100-199"})
    assert resp.status == 206 and len(body) == 100
    assert resp.getheader("content-range") == f"bytes 100-199/{size}"
    resp, _ = _get(server, "/files/0/config.yaml")
    assert resp.status == 200 and resp.getheader("content-type").startswith("text/plain")
    assert resp.getheader("x-content-type-options") == "nosniff"


def test_read_only_and_host_check(server):
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert _get(server, VIDEO, method=method)[0].status == 405
    # DNS rebinding: a loopback server refuses foreign Host headers.
    assert _get(server, "/api/catalog", headers={"Host": "evil.example:80"})[0].status == 400
    assert _get(server, "/api/catalog", headers={"Host": f"localhost:{server.port}"})[0].status == 200


def test_catalog_lists_broken_sidecars_with_warnings(server):
    catalog = json.loads(_get(server, "/api/catalog")[1])
    by_tag = {(v["global_step"], v["tag"]): v for v in catalog["videos"]}
    assert {k for k in by_tag if k[0] == 3} == {(3, "no_sidecar"), (3, "corrupt_sidecar")}
    assert "missing" in by_tag[3, "no_sidecar"]["warnings"][0]
    assert "corrupt JSON" in by_tag[3, "corrupt_sidecar"]["warnings"][0]
    assert by_tag[3, "no_sidecar"]["sources"] and not by_tag[3, "no_sidecar"]["episodes"]
    # Symlinks leading outside are skipped, with a run-level warning, never listed.
    warnings = " ".join(catalog["runs"][0]["warnings"])
    assert "evil.json skipped" in warnings and (1, "evil") not in by_tag
    assert all(v["global_step"] != 9 for v in catalog["videos"])
    assert catalog["runs"][0]["metrics"]["env/success_once"] == [[1, 0.25], [2, 0.5], [3, 0.75]]


def test_catalog_carries_health(server, run_dir):
    """The run's health travels in its catalog entry; a NaN alarm value (a non-finite loss) must
    not break the strict JSON response, and health.jsonl is served like metrics.jsonl."""
    assert json.loads(_get(server, "/api/catalog")[1])["runs"][0]["health"]["status"] == "no health record"
    alarm = {"event": "alarm", "kind": "nonfinite", "metric": "train/actor/loss", "step": 2, "value": float("nan"),
             "threshold": 0.0, "onset": 2, "action": "stop", "above": True, "hint": "", "detail": ""}
    stop_line = {"event": "stop", "step": 2, "reason": "health: nonfinite at step 2"}
    record = run_dir / "health.jsonl"
    record.write_text(json.dumps(alarm) + "\n" + json.dumps(stop_line) + "\n")
    try:
        resp, body = _get(server, "/api/catalog")
        assert resp.status == 200
        health = json.loads(body)["runs"][0]["health"]
        assert health["status"] == "stopped" and health["alarms"][0]["value"] is None
        assert health["reasons"] == ["nonfinite at step 2: train/actor/loss = nan > 0 (action: stop)",
                                     "stopped at step 2: nonfinite at step 2"]
        assert _get(server, "/files/0/health.jsonl")[0].status == 200
    finally:
        record.unlink()


def test_cli_user_errors(tmp_path, capsys, run_dir):
    assert main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: run directory") and "does not exist" in err and "\n" not in err
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        assert main([str(run_dir), "--port", str(busy.getsockname()[1])]) == 2
        assert "cannot listen on 127.0.0.1" in capsys.readouterr().err
    finally:
        busy.close()
    assert main([str(run_dir), "--link-videos"]) == 2
    assert "--link-videos only applies with --export" in capsys.readouterr().err
