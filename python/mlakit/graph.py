"""mlakit.StreamGraph: a CUDA graph of the work mlakit enqueues on one stream, replayed with one
native call (``include/mlakit/graph.h``). With an :class:`~mlakit.MlaStep`,
``step.plan(..., replay=graph)`` plans the step and launches the graph of its layers in the same
call, so a graph-replayed step crosses from Python into the library once:

    graph = mlakit.StreamGraph("cuda")
    step.plan(q_lens, ctx_lens, block_table, graph_rows=G)
    for l in layers: step.run(...)                   # once eagerly (one-time kernel setup)
    with graph.capture():                            # a side stream, current inside the block
        for l in layers: step.run(..., out=out[l])   # outputs given: nothing allocated inside
    ...
    step.plan(q_lens, ctx_lens, block_table, graph_rows=G, replay=graph)   # every step

Only mlakit calls with their outputs given belong inside a capture: a framework allocating inside
it (PyTorch's caching allocator) does not know the memory is owned by a graph. Engines that
capture their whole model with ``torch.cuda.graph`` need none of this.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator

from . import _C, _device_name, _stream_handle

__all__ = ["StreamGraph"]


class StreamGraph:
    """A CUDA graph captured from one stream and launched natively (see the module docstring)."""

    def __init__(self, device: Any = "cuda") -> None:
        name = _device_name(device)
        if name == "cuda":
            name = "cuda:0"
        self._impl = _C.StreamGraph(name)
        self._device = name

    @property
    def captured(self) -> bool:
        return self._impl.captured

    @contextlib.contextmanager
    def capture(self, stream: Any = None) -> Iterator[Any]:
        """Records what is enqueued on ``stream`` inside the block (replacing an earlier graph).
        Default: a new PyTorch side stream that waits for the current one, made current for the
        block, and waited for by the current stream afterwards (the legacy default stream cannot
        be captured). A torch stream given is made current for the block; a raw handle is not (pass
        it to each call inside). An exception inside discards the capture and keeps the earlier
        graph. Not thread-safe: capture and replay one graph from one thread."""
        torch = sys.modules.get("torch")
        if stream is None:
            if torch is None:
                raise ValueError("mlakit: StreamGraph.capture: stream: give one (an int cudaStream_t) "
                                 "when PyTorch is not in use")
            side = torch.cuda.Stream(device=self._device)
            side.wait_stream(torch.cuda.current_stream(self._device))
            with torch.cuda.stream(side):
                with self._capturing(side.cuda_stream):
                    yield side
            torch.cuda.current_stream(self._device).wait_stream(side)
        elif torch is not None and isinstance(stream, torch.cuda.Stream):
            # Made current for the block, so that mlakit calls that take the current stream are
            # captured (not run eagerly on another stream, leaving the graph empty).
            with torch.cuda.stream(stream):
                with self._capturing(stream.cuda_stream):
                    yield stream
        else:
            with self._capturing(_stream_handle(stream)):
                yield stream

    @contextlib.contextmanager
    def _capturing(self, handle: int) -> Iterator[None]:
        self._impl.begin_capture(handle)
        try:
            yield
        except BaseException:
            self._impl.abort_capture()
            raise
        self._impl.end_capture()

    def replay(self, stream: Any = None) -> None:
        """Launches the graph on ``stream`` (default: the current PyTorch stream of its device)."""
        self._impl.launch(_stream_handle(stream, device=self._device))

    def __repr__(self) -> str:
        return f"mlakit.StreamGraph(device={self._device!r}, captured={self.captured})"
