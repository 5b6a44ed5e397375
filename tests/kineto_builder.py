"""A writer of PyTorch-profiler (Kineto) Chrome traces for tests, laid out as Kineto writes them.

Times are given in integer nanoseconds and written as Kineto writes them, microseconds with
three decimals (``"ts": 1234.567``), relative to ``baseTimeNanoseconds``; host events carry the
operating system's pid and tid, GPU events the device as ``pid`` and the stream as ``tid``,
with ``device``/``stream``/``correlation`` in their args (libkineto's output_json.cpp and
CuptiActivity.cpp). The text is built by hand, not by ``json.dumps`` of floats, so that the
times in the file are exactly the ones given.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from specnsys.vocabulary import TORCH_MARK_PREFIX, TORCH_RANGE_PREFIX


def us(ns: int) -> str:
    """Nanoseconds as Kineto's microsecond text, ``<int>.<3 digits>``."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


class ChromeTrace:
    """Events of one trace; :meth:`write` lays them out as a torch.profiler JSON file."""

    def __init__(self, pid: int = 1, tid: int = 1, process: str | None = "python3") -> None:
        self.pid, self.tid = pid, tid
        self.events: list[str] = []
        self.device_properties: list[dict[str, Any]] = []
        if process is not None:
            self.process(pid, process)
            self.thread(pid, tid, f"thread {tid} (python3)")

    # ------------------------------------------------------------------ metadata

    def _meta(self, what: str, pid: int, tid: int, name: str) -> None:
        self.events.append(
            f'{{"ph": "M", "name": "{what}", "ts": 0.000, "pid": {pid}, "tid": {tid}, '
            f'"args": {{"name": {json.dumps(name)}}}}}'
        )

    def process(self, pid: int, name: str) -> ChromeTrace:
        self._meta("process_name", pid, 0, name)
        return self

    def thread(self, pid: int, tid: int, name: str) -> ChromeTrace:
        self._meta("thread_name", pid, tid, name)
        return self

    def device(self, device_id: int, name: str = "NVIDIA H100", sms: int = 132) -> ChromeTrace:
        self.device_properties.append(
            {"id": device_id, "name": name, "totalGlobalMem": 85_000_000_000,
             "computeMajor": 9, "computeMinor": 0, "numSms": sms}
        )  # fmt: skip
        return self

    # ------------------------------------------------------------------ events

    def complete(
        self, start: int, end: int, name: str, cat: str, pid: int | None = None,
        tid: int | None = None, args: dict[str, Any] | None = None,
    ) -> ChromeTrace:  # fmt: skip
        """One ``ph: X`` event from *start* to *end* (ns)."""
        pid = self.pid if pid is None else pid
        tid = self.tid if tid is None else tid
        text = (
            f'{{"ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {pid}, '
            f'"tid": {tid}, "ts": {us(start)}, "dur": {us(end - start)}'
        )
        if args:
            text += f', "args": {json.dumps(args)}'
        self.events.append(text + "}")
        return self

    def scope(self, start: int, end: int | None, name: str, **kw: Any) -> ChromeTrace:
        """A ``record_function`` scope (``user_annotation``); *end* None: never finished
        (Kineto writes it to the profiler's end with ``finished: false``)."""
        if end is None:
            return self.complete(start, start + 10**6, name, "user_annotation",
                                 args={"finished": False}, **kw)  # fmt: skip
        return self.complete(start, end, name, "user_annotation", **kw)

    def op(self, start: int, end: int, name: str, **kw: Any) -> ChromeTrace:
        return self.complete(start, end, name, "cpu_op", **kw)

    def range(self, start: int, end: int, phase: str, **kw: Any) -> ChromeTrace:
        return self.scope(start, end, phase, **kw)

    def request(self, start: int, end: int | None, request_id: int, **kw: Any) -> ChromeTrace:
        return self.scope(start, end, f"{TORCH_RANGE_PREFIX}request={request_id}", **kw)

    def mark(self, t: int, name: str, value: int | None = None, **kw: Any) -> ChromeTrace:
        payload = "" if value is None else f"={value}"
        return self.scope(t, t + 2000, f"{TORCH_MARK_PREFIX}{name}{payload}", **kw)

    def runtime(
        self, start: int, end: int, name: str, correlation: int | None, *,
        driver: bool = False, **kw: Any,
    ) -> ChromeTrace:  # fmt: skip
        args = {"cbid": 211} if correlation is None else {"cbid": 211, "correlation": correlation}
        return self.complete(start, end, name, "cuda_driver" if driver else "cuda_runtime",
                             args=args, **kw)  # fmt: skip

    def _gpu(self, args: dict[str, Any], device: int, stream: int, correlation: int) -> dict[str, Any]:
        return {"device": device, "context": 1, "stream": stream, "correlation": correlation, **args}

    def kernel(
        self, start: int, end: int, name: str, correlation: int, *, device: int = 0,
        stream: int = 7, grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
    ) -> ChromeTrace:  # fmt: skip
        args = self._gpu({"grid": list(grid), "block": list(block)}, device, stream, correlation)
        return self.complete(start, end, name, "kernel", pid=device, tid=stream, args=args)

    def memcpy(
        self, start: int, end: int, nbytes: int, correlation: int, *, kind: str = "HtoD",
        src: str = "Pageable", dst: str = "Device", device: int = 0, stream: int = 7,
    ) -> ChromeTrace:  # fmt: skip
        args = self._gpu({"bytes": nbytes}, device, stream, correlation)
        return self.complete(start, end, f"Memcpy {kind} ({src} -> {dst})", "gpu_memcpy",
                             pid=device, tid=stream, args=args)  # fmt: skip

    def memset(
        self, start: int, end: int, nbytes: int, correlation: int, *, device: int = 0,
        stream: int = 7,
    ) -> ChromeTrace:  # fmt: skip
        args = self._gpu({"bytes": nbytes}, device, stream, correlation)
        return self.complete(start, end, "Memset (Device)", "gpu_memset", pid=device,
                             tid=stream, args=args)  # fmt: skip

    def gpu_annotation(self, start: int, end: int, name: str, *, device: int = 0,
                       stream: int = 7) -> ChromeTrace:  # fmt: skip
        return self.complete(start - 1, end + 1, name, "gpu_user_annotation", pid=device,
                             tid=stream)  # fmt: skip

    def raw(self, text: str) -> ChromeTrace:
        """An event written as given (for malformed ones)."""
        self.events.append(text)
        return self

    # ------------------------------------------------------------------ the file

    def text(self, *, layout: str = "object") -> str:
        """The file's text: Kineto's object (``layout="object"``) or a bare event array."""
        end = '{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 0.000}'
        body = ",\n  ".join([*self.events, end])
        if layout == "array":
            return f"[\n  {body}\n]\n"
        return (
            '{\n  "schemaVersion": 1,\n'
            f'  "deviceProperties": {json.dumps(self.device_properties)},\n'
            '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1790857026000000000,\n'
            f'  "traceEvents": [\n  {body}\n  ],\n  "traceName": "built.json"\n}}\n'
        )

    def write(self, path: Path, *, layout: str = "object") -> Path:
        data = self.text(layout=layout).encode()
        if path.name.endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path
