"""PNG plots of simulator outputs (matplotlib, optional extra `sim`, imported lazily)."""

from gpu_platform.adapters.outbound.plots.arrivals import write_arrivals_plots
from gpu_platform.adapters.outbound.plots.charts import (
    INSTALL_HINT,
    PlotsUnavailable,
    Series,
    bar_chart,
    cdf_chart,
    line_chart,
    require_matplotlib,
    stacked_chart,
)
from gpu_platform.adapters.outbound.plots.fgd import ALLOC_PNG, UNALLOCATED_PNG, write_fgd_plots

__all__ = [
    "ALLOC_PNG",
    "INSTALL_HINT",
    "UNALLOCATED_PNG",
    "PlotsUnavailable",
    "Series",
    "bar_chart",
    "cdf_chart",
    "line_chart",
    "require_matplotlib",
    "stacked_chart",
    "write_arrivals_plots",
    "write_fgd_plots",
]
