"""nsys export -> normalized columnar trace model (schema detection per version)."""

from specnsys.ingest.model import MODEL_TABLES
from specnsys.ingest.trace import Trace, open_trace

__all__ = ["MODEL_TABLES", "Trace", "open_trace"]
