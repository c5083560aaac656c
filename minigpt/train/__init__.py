"""Training a model: starting a run, new, resumed or fine-tuned (launch), the Trainer and its loop
(trainer), the state it carries (state), the optimizers (optim), the schedule, the memory
preflight and what a run reports (reporting: tqdm and TensorBoard live only here)."""
