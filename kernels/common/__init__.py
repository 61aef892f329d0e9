"""What the kernels share: argument checking (more of the kernel scaffold lands here)."""
