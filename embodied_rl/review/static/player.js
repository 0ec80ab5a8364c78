// A video player bound to one episode: plays [frame_start, frame_end) of the tiled video,
// marks (or zooms to) the episode's tile and shows the episode's data beside the video.
"use strict";
(function (R) {
  const el = R.el;
  const SPEEDS = [0.25, 0.5, 1, 2, 4];

  R.Player = class {
    constructor(container, onSelect) {
      this.onSelect = onSelect; // called with (video, ep) when a sibling episode is chosen
      this.listed = () => true; // which sibling episodes to offer (the owner hides cut-at-start ones)
      this.video = null;
      this.ep = null;
      this.pendingSeek = false;
      this.autoplay = false;
      this.raf = 0;
      this.media = el("video", { muted: true, playsInline: true, preload: "auto", controls: true });
      this.media.muted = true;
      this.box = el("div", { className: "tile-box", hidden: true });
      this.stage = el("div", { className: "stage" }, [this.media, this.box]);
      this.playBtn = el("button", { type: "button", className: "play", textContent: "▶ Play", onclick: () => this.toggle() });
      this.loop = el("input", { type: "checkbox", checked: true });
      this.zoom = el("input", { type: "checkbox", onchange: () => this.layoutTile() });
      this.whole = el("input", { type: "checkbox", onchange: () => this.seekStart() });
      this.speed = el("select", { onchange: () => { this.media.playbackRate = Number(this.speed.value); } },
        SPEEDS.map((s) => el("option", { value: String(s), textContent: s + "×", selected: s === 1 })));
      this.readout = el("span", { className: "readout muted" });
      const controls = el("div", { className: "controls" }, [
        this.playBtn,
        el("button", { type: "button", textContent: "⟲ Episode start", onclick: () => this.seekStart() }),
        el("button", { type: "button", textContent: "◀ frame", onclick: () => this.stepFrame(-1) }),
        el("button", { type: "button", textContent: "frame ▶", onclick: () => this.stepFrame(1) }),
        this.speed,
        el("label", {}, [this.loop, " loop episode"]),
        el("label", {}, [this.zoom, " zoom to env tile"]),
        el("label", {}, [this.whole, " whole video"]),
        this.readout,
      ]);
      this.warnings = el("ul", { className: "warnings", hidden: true });
      this.info = el("dl", { className: "info" });
      this.siblings = el("div", { className: "siblings" });
      this.root = el("div", { className: "player", hidden: true }, [
        el("div", { className: "player-main" }, [this.stage, controls, this.warnings]),
        el("div", { className: "player-side" }, [this.info, this.siblings]),
      ]);
      container.append(this.root);
      this.media.addEventListener("loadedmetadata", () => this.onMetadata());
      this.media.addEventListener("play", () => { this.playBtn.textContent = "❚❚ Pause"; this.startWatch(); });
      this.media.addEventListener("pause", () => { this.playBtn.textContent = "▶ Play"; cancelAnimationFrame(this.raf); this.updateReadout(); });
      this.media.addEventListener("seeked", () => this.updateReadout());
    }

    fps() { return (this.video && this.video.fps) || 0; }

    // [start, end) in seconds of what is being played: the episode or the whole video.
    range() {
      const fps = this.fps(), ep = this.ep;
      if (ep && ep.seekable && fps && !this.whole.checked) return [ep.frame_start / fps, ep.frame_end / fps];
      return [0, Number.isFinite(this.media.duration) ? this.media.duration : Infinity];
    }

    show(video, ep, autoplay) {
      this.root.hidden = false;
      this.ep = ep;
      this.autoplay = !!autoplay;
      if (!this.video || this.video.id !== video.id) {
        this.video = video;
        this.media.pause();
        this.media.replaceChildren();
        video.sources.forEach((src, i) => {
          const node = el("source", { src: src.url, type: src.type });
          if (i === video.sources.length - 1) node.addEventListener("error", () => this.playbackError());
          this.media.append(node);
        });
        this.pendingSeek = true;
        this.media.load();
      } else {
        this.video = video;
        this.seekStart();
        if (this.autoplay) this.play();
      }
      this.renderInfo();
      this.layoutTile();
    }

    onMetadata() {
      this.layoutTile();
      if (!this.pendingSeek) return;
      this.pendingSeek = false;
      this.seekStart();
      if (this.autoplay) this.play();
    }

    playbackError() {
      const types = this.video.sources.map((s) => s.type).join(", ");
      this.showWarnings(R.warningsOf({ video: this.video, ep: this.ep })
        .concat([`this browser cannot play the video (${types || "no file"})`]));
    }

    seekStart() {
      const fps = this.fps();
      const [start] = this.range();
      // Seek to the middle of the first frame so rounding never shows the previous episode.
      this.media.currentTime = start + (fps && start > 0 ? 0.5 / fps : 0);
    }

    play() {
      const [start, end] = this.range();
      const t = this.media.currentTime;
      if (t < start || t >= end - 1e-3) this.seekStart();
      const promise = this.media.play();
      if (promise) promise.catch(() => {});
    }

    pause() { this.media.pause(); }
    toggle() { if (this.media.paused) this.play(); else this.pause(); }

    stepFrame(delta) {
      const fps = this.fps();
      if (!fps) return;
      this.pause();
      const [start, end] = this.range();
      const frame = Math.floor(this.media.currentTime * fps + 1e-6) + delta;
      const t = (frame + 0.5) / fps;
      this.media.currentTime = Math.min(Math.max(t, start), end - 0.5 / fps);
    }

    // Stop or loop at the episode end; a frame callback is far finer than 'timeupdate' (4 Hz).
    startWatch() {
      cancelAnimationFrame(this.raf);
      const tick = () => {
        if (this.media.paused) return;
        const [start, end] = this.range();
        if (this.media.currentTime >= end - 1e-3 || this.media.ended) {
          if (this.loop.checked && Number.isFinite(end)) {
            this.seekStart();
            if (this.media.ended || this.media.paused) this.media.play().catch(() => {});
          } else {
            this.media.pause();
            if (this.fps() && Number.isFinite(end)) this.media.currentTime = end - 0.5 / this.fps();
          }
        }
        this.updateReadout();
        this.raf = requestAnimationFrame(tick);
      };
      this.raf = requestAnimationFrame(tick);
    }

    updateReadout() {
      const fps = this.fps(), t = this.media.currentTime;
      if (!fps) { this.readout.textContent = R.num(t) + " s"; return; }
      // At the very end (a one-frame episode that just played) t is one frame past the last.
      const last = this.video.num_frames ? this.video.num_frames - 1 : Infinity;
      const frame = Math.min(Math.floor(t * fps + 1e-6), last);
      const ep = this.ep;
      const span = ep && ep.seekable ? ` · episode frames ${ep.frame_start}–${ep.frame_end - 1}` : "";
      this.readout.textContent = `frame ${frame}${span}`;
    }

    layoutTile() {
      const g = this.video && this.video.grid, ep = this.ep, m = this.media;
      const hasTile = !!(g && ep && ep.env_index != null);
      this.zoom.disabled = !hasTile;
      const zoomed = hasTile && this.zoom.checked;
      this.stage.classList.toggle("zoomed", zoomed);
      m.controls = !zoomed;
      for (const key of ["width", "left", "top"]) m.style[key] = "";
      this.stage.style.aspectRatio = "";
      this.box.hidden = true;
      if (!hasTile) return;
      const vw = m.videoWidth || g.cols * g.tile_width, vh = m.videoHeight || g.rows * g.tile_height;
      const row = Math.floor(ep.env_index / g.cols), col = ep.env_index % g.cols;
      if (zoomed) {
        this.stage.style.aspectRatio = `${g.tile_width} / ${g.tile_height}`;
        m.style.width = (100 * vw / g.tile_width) + "%";
        m.style.left = (-100 * col) + "%";
        m.style.top = (-100 * row) + "%";
      } else if (g.num_envs > 1) {
        this.box.hidden = false;
        this.box.style.left = (100 * col * g.tile_width / vw) + "%";
        this.box.style.top = (100 * row * g.tile_height / vh) + "%";
        this.box.style.width = (100 * g.tile_width / vw) + "%";
        this.box.style.height = (100 * g.tile_height / vh) + "%";
      }
    }

    showWarnings(list) {
      this.warnings.replaceChildren(...list.map((w) => el("li", { textContent: "⚠ " + w })));
      this.warnings.hidden = list.length === 0;
    }

    renderInfo() {
      const v = this.video, ep = this.ep || {};
      const outcome = R.outcome(this.ep);
      const yesNo = (b) => (b == null ? null : b ? "yes" : "no");
      const rows = [
        ["Result", R.resultLabel(this.ep)],
        ["Success once", yesNo(ep.success_once)], ["Success at end", yesNo(ep.success_at_end)],
        ["Task", ep.task_id], ["Instruction", ep.instruction],
        ["Run", v.run_name], ["Mode", v.mode], ["Global step", v.global_step],
        ["Policy version (steps trained)", v.policy_version],
        ["Return", R.num(ep.return, 3)], ["Length", ep.length],
        ["Env index", ep.env_index], ["Reset id", ep.reset_id],
        ["Worker / stage", v.env_worker != null ? `${v.env_worker} / ${v.stage}` : null],
        ["Frames", ep.seekable ? `${ep.frame_start}–${ep.frame_end - 1} of ${v.num_frames} @ ${v.fps} fps` : null],
        ["Simulator", v.simulator], ["Video", v.path],
      ];
      this.info.replaceChildren();
      this.info.dataset.outcome = outcome;
      for (const [key, value] of rows) {
        if (value == null || value === "") continue;
        this.info.append(el("dt", { textContent: key }), el("dd", { textContent: String(value) }));
      }
      this.showWarnings(R.warningsOf({ video: v, ep: this.ep }));
      const listed = v.episodes.filter((other) => other.id === ep.id || this.listed(other));
      const others = listed.length > 1 ? listed : [];
      this.siblings.replaceChildren(...(others.length ? [el("div", { className: "muted", textContent: "Episodes in this video:" })] : []),
        ...others.map((other) => el("button", {
          type: "button", className: "sibling" + (other.id === ep.id ? " current" : ""),
          textContent: `env ${other.env_index} · ${R.resultLabel(other)} · ${R.num(other.return)}`,
          onclick: () => (this.onSelect ? this.onSelect(v, other) : this.show(v, other, true)),
        })));
    }
  };
})(window.Review);
