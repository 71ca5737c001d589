"""Generated from gpu_platform.proto by `make proto`; do not edit by hand."""
