"""Training a model: the plan (plan, launch), the loop (loop) and the run around it (trainer), its
components (callbacks, progress, tensorboard), optimizers, schedule and preflights."""
