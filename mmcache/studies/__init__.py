"""Code only the notebooks use: CLIP–Whisper alignment and retrieval, the threshold study and the
priors fit (``make priors``), the scheduler study, and the cold-start collapse study."""
