"""The demo that `gpupool up --demo` runs, and the example training script it submits."""
