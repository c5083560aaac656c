"""Training a model: what is asked (plan), the run it becomes, new, resumed or fine-tuned (launch),
the Trainer and its loop (trainer), the callbacks that watch it (callbacks; progress and
tensorboard, where tqdm and TensorBoard live), the state it carries (state), the optimizers
(optim), the schedule and the preflights."""
