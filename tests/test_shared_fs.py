"""The shared-filesystem probe: what a node must see of the driver's directories and paths.
(Run on a real 2-node cluster in test_multinode.py, where a relative path fails it.)"""
from __future__ import annotations

from pathlib import Path

from embodied_rl.distributed.shared_fs import MARKER, look, problems


def _setup(tmp_path: Path, nonce: str) -> tuple[dict[str, str], dict[str, str]]:
    out = tmp_path / "run"
    out.mkdir()
    (out / MARKER.format(nonce=nonce)).write_text(nonce)
    model = tmp_path / "model"
    model.mkdir()
    return {"runner.logger.log_path": str(out)}, {"actor.model.model_path": str(model)}


def test_a_node_that_sees_the_drivers_files_has_no_problems(tmp_path: Path):
    write, read = _setup(tmp_path, "abc")
    view = look("node-1", "abc", write, read)
    assert view.nonce_seen == {"runner.logger.log_path": True} and view.writable == {"runner.logger.log_path": True}
    assert problems([view], write, read) == []
    assert sorted(p.name for p in Path(write["runner.logger.log_path"]).iterdir()) == [MARKER.format(nonce="abc")]


def test_another_directory_under_the_same_path_is_named(tmp_path: Path):
    write, read = _setup(tmp_path, "abc")
    view = look("node-2-id-long", "another-nonce", write, read)  # the marker the driver wrote is not there
    assert problems([view], write, read) == [
        f"runner.logger.log_path={write['runner.logger.log_path']} is not the same directory on node node-2-i as on the driver"]


def test_missing_read_path_and_unwritable_directory_are_named(tmp_path: Path):
    write, read = _setup(tmp_path, "abc")
    read["data.train_data_paths[0]"] = str(tmp_path / "no-demos")
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    view = look("node-3", "abc", write, read)
    view.writable["runner.logger.log_path"] = look("node-3", "abc", {"x": str(blocked)}, {}).writable["x"]
    assert problems([view], write, read) == [
        f"runner.logger.log_path={write['runner.logger.log_path']} is not writable from node node-3",
        f"data.train_data_paths[0]={tmp_path / 'no-demos'} does not exist on node node-3"]
