"""The panel's omni.ui window: it draws ``PanelState`` and forwards clicks to it, nothing
more (Kit only; not run on the project's machines, which have no Isaac Sim)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import carb
import numpy as np
import omni.ext
import omni.kit.app
import omni.ui as ui

from r2s2r_panel.state import JobStatus, PanelState

# Seconds between two refreshes of the jobs' progress.
POLL_S = 0.5
DIFFER = 0xFF4080FF  # Differing parameters (ABGR).


class R2s2rPanelExtension(omni.ext.IExt):
    """Builds the window on startup; stops running jobs and closes it on shutdown."""

    def on_startup(self, ext_id: str) -> None:
        self.state = PanelState()
        self._since = 0.0
        self._window = ui.Window("r2s2r", width=560, height=760)
        with self._window.frame, ui.ScrollingFrame(), ui.VStack(spacing=6, height=0):
            self._world_section()
            self._generate_section()
            self._episodes_section()
            self._render_section()
            self._error = ui.Label("", style={"color": 0xFF3030FF}, word_wrap=True)
        stream = omni.kit.app.get_app().get_update_event_stream()
        self._tick = stream.create_subscription_to_pop(self._on_update, name="r2s2r panel")

    def on_shutdown(self) -> None:
        self.state.shutdown()
        self._tick = None
        if self._window is not None:
            self._window.destroy()
            self._window = None

    # ------------------------------------------------------------------ sections
    def _world_section(self) -> None:
        with ui.CollapsableFrame("World"), ui.VStack(spacing=4, height=0):
            worlds, conditions = self.state.world_choices(), self.state.condition_choices()
            with ui.HStack(height=22):
                ui.Label("world", width=80)
                self._world = ui.ComboBox(0, *worlds)
                self._world_path = ui.StringField(tooltip="or a WorldSpec YAML (grounded.yaml)")
            with ui.HStack(height=22):
                ui.Label("condition", width=80)
                self._condition = ui.ComboBox(0, *conditions)
            self._all = ui.CheckBox(tooltip="show every parameter, not only those that differ")
            ui.Button("Load world", height=24, clicked_fn=self._load_world)
            self._table = ui.ScrollingFrame(height=220)

    def _generate_section(self) -> None:
        with ui.CollapsableFrame("Generate (headless)"), ui.VStack(spacing=4, height=0):
            self._gen_out = _field("out", "outputs/panel/generated")
            self._gen_source = _field("source demos", "")
            self._gen_behavior = _field("behavior", "planned")
            self._gen_episodes = _int_field("episodes", 10)
            self._gen_size = _int_field("image size", 0)
            with ui.HStack(height=24):
                ui.Button("Start", clicked_fn=self._start_generation)
                ui.Button("Cancel", clicked_fn=lambda: self.state.cancel("generate"))
            self._gen_bar, self._gen_label = ui.ProgressBar(height=18), ui.Label("", word_wrap=True)

    def _episodes_section(self) -> None:
        with ui.CollapsableFrame("Episodes"), ui.VStack(spacing=4, height=0):
            self._ep_root = _field("dataset", "outputs/panel/generated")
            self._ep_index = _int_field("episode", 0)
            self._ep_camera = _field("camera", "head")
            ui.Button("List / show", height=24, clicked_fn=self._show_episodes)
            self._ep_list = ui.ScrollingFrame(height=160)
            self._ep_image = ui.ByteImageProvider()
            ui.ImageWithProvider(self._ep_image, height=200)

    def _render_section(self) -> None:
        with ui.CollapsableFrame("Render with RTX"), ui.VStack(spacing=4, height=0):
            self._r_source = _field("dataset", "outputs/panel/generated")
            self._r_out = _field("out", "outputs/panel/rtx")
            self._r_usd = _field("cell USD", "")
            self._r_size = _int_field("image size", 256)
            with ui.HStack(height=24):
                ui.Button("Start", clicked_fn=self._start_render)
                ui.Button("Cancel", clicked_fn=lambda: self.state.cancel("render"))
            self._r_bar, self._r_label = ui.ProgressBar(height=18), ui.Label("", word_wrap=True)

    # ------------------------------------------------------------------ actions
    def _guard(self, action: Any) -> None:
        try:
            action()
            self._error.text = ""
        except Exception as err:  # Shown in the window; the panel keeps running.
            carb.log_warn(f"r2s2r panel: {err}")
            self._error.text = str(err)

    def _load_world(self) -> None:
        def load() -> None:
            worlds = self.state.world_choices()
            conditions = self.state.condition_choices()
            path = self._world_path.model.as_string.strip()
            world = path or worlds[_combo(self._world)]
            self.state.select(world, conditions[_combo(self._condition)])
            rows = self.state.load_world()
            shown = rows if self._all.model.as_bool else self.state.differences()
            with self._table, ui.VStack(height=0):
                with ui.HStack(height=20):
                    for title in ("parameter", "nominal", "this world"):
                        ui.Label(title, style={"font_size": 14})
                for r in shown:
                    style = {"color": DIFFER} if r.differs else {}
                    with ui.HStack(height=18):
                        ui.Label(r.key, style=style, elided_text=True)
                        ui.Label(_short(r.nominal), style=style)
                        ui.Label(_short(r.value), style=style)

        self._guard(load)

    def _start_generation(self) -> None:
        source = self._gen_source.model.as_string.strip()
        self._guard(
            lambda: self.state.start_generation(
                Path(self._gen_out.model.as_string),
                self._gen_episodes.model.as_int,
                behavior=self._gen_behavior.model.as_string,
                source=Path(source) if source else None,
                image_size=self._gen_size.model.as_int,
            )
        )

    def _show_episodes(self) -> None:
        def show() -> None:
            root = Path(self._ep_root.model.as_string)
            rows = self.state.episodes(root)
            with self._ep_list, ui.VStack(height=0):
                for r in rows:
                    ok = "ok" if r.success else "failed"
                    objects = ", ".join(r.objects)
                    ui.Label(
                        f"{r.index:4d}  {r.seconds:5.1f} s  {ok:6s}  {objects}  "
                        f"belt {r.belt_speed or 0:.3f}  {r.world} / {r.behavior}"
                    )
            img = self.state.preview(
                root, self._ep_index.model.as_int, self._ep_camera.model.as_string
            )
            rgba = np.concatenate([img, np.full((*img.shape[:2], 1), 255, np.uint8)], axis=2)
            self._ep_image.set_bytes_data(rgba.flatten().tolist(), [img.shape[1], img.shape[0]])

        self._guard(show)

    def _start_render(self) -> None:
        usd = self._r_usd.model.as_string.strip()
        self._guard(
            lambda: self.state.start_render(
                Path(self._r_source.model.as_string),
                Path(self._r_out.model.as_string),
                Path(usd) if usd else None,
                image_size=self._r_size.model.as_int,
            )
        )

    def _on_update(self, event: Any) -> None:
        self._since += float(event.payload.get("dt", 0.0))
        if self._since < POLL_S:
            return
        self._since = 0.0
        _show(self.state.status("generate"), self._gen_bar, self._gen_label)
        _show(self.state.status("render"), self._r_bar, self._r_label)


def _field(label: str, value: str) -> ui.StringField:
    with ui.HStack(height=22):
        ui.Label(label, width=100)
        f = ui.StringField()
        f.model.set_value(value)
    return f


def _int_field(label: str, value: int) -> ui.IntField:
    with ui.HStack(height=22):
        ui.Label(label, width=100)
        f = ui.IntField()
        f.model.set_value(value)
    return f


def _combo(combo: ui.ComboBox) -> int:
    return int(combo.model.get_item_value_model().as_int)


def _short(value: object) -> str:
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return text if len(text) < 40 else text[:37] + "..."


def _show(status: JobStatus | None, bar: ui.ProgressBar, label: ui.Label) -> None:
    if status is None:
        return
    bar.model.set_value(status.fraction)
    total = "?" if status.total is None else status.total
    state = "running" if status.running else f"ended ({status.returncode})"
    tail = status.log_tail[-1] if status.log_tail else ""
    label.text = f"{status.done}/{total} {status.message}  {state}\n{tail}"
