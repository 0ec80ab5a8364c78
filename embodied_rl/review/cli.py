"""`embodied-rl review RUN_DIR [RUN_DIR...] [--port N] [--host H] [--export OUT_DIR]`."""
from __future__ import annotations

import argparse
import sys

from embodied_rl.errors import UserError
from embodied_rl.review.server import DEFAULT_HOST, DEFAULT_PORT


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embodied-rl review",
        description="Browse the rollout videos, episodes and curves of one or more runs.")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directory (runs/<experiment_name>) or a folder of runs")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--export", metavar="OUT_DIR",
                        help="write a static copy that opens from disk instead of serving")
    parser.add_argument("--link-videos", action="store_true",
                        help="with --export: symlink the videos instead of copying them")
    return parser


def _serve(runs: list, host: str, port: int) -> None:
    import uvicorn

    from embodied_rl.review.server import bind_socket, create_app, is_loopback

    sock = bind_socket(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"Reviewing {len(runs)} run(s): {', '.join(r.name for r in runs)}")
    print(f"Open http://{shown}:{bound_port}/  (Ctrl-C to stop)", flush=True)
    if not is_loopback(host):
        print(f"warning: listening on {host}: anyone who can reach this address can view these runs",
              file=sys.stderr)
    config = uvicorn.Config(create_app(runs, host), log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def main(argv: list[str]) -> int:
    """Entry point the top-level CLI dispatches to; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        from embodied_rl.review.catalog import discover_runs

        if not 0 <= args.port <= 65535:
            raise UserError(f"--port {args.port} is out of range; pass 0..65535")
        if args.link_videos and not args.export:
            raise UserError("--link-videos only applies with --export OUT_DIR")
        runs = discover_runs(args.run_dirs)
        if args.export:
            from embodied_rl.review.export import export_static

            counts = export_static(runs, args.export, link=args.link_videos)
            print(f"Exported {counts['videos']} videos ({counts['episodes']} episodes) to "
                  f"{args.export}; open {args.export}/index.html in a browser")
            return 0
        _serve(runs, args.host, args.port)
        return 0
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
