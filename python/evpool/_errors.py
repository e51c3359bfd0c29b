"""evpool's exceptions."""

from __future__ import annotations


class CUDAError(RuntimeError):
    """Work on a stream, or a CUDA call of evpool's, ended with a CUDA error.

    ``status`` is CUDA's number (``cudaError_t``), ``name`` its name (``"cudaErrorIllegalAddress"``).
    """

    def __init__(self, status: int, name: str, message: str | None = None):
        super().__init__(message or f"evpool: the stream's work ended with {name} ({status})")
        self.status = status
        self.name = name

    def __reduce__(self):  # picklable: futures' exceptions cross process pools
        return type(self), (self.status, self.name, str(self))
