"""laraq: Laravel's Redis queue, spoken natively by Python.

See ARCHITECTURE.md for the module map. The stable public API is re-exported here as modules land.
"""

from laraq.app import App
from laraq.versions import DEFAULT_VERSION, LaravelVersion

__all__ = ["App", "DEFAULT_VERSION", "LaravelVersion"]
__version__ = "0.1.0"
