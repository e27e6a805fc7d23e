"""The training layer:

loss, optim           label-smoothed cross entropy; Adam and eq. 3's schedule
run_data              a run's batches, this rank's sampler, the valid split
state, stopping       what exact resume restores; every stop, save and validate rule
run_checkpoints, run_dir, run_log   a run's checkpoints, its directory, its logs
trainer               the loop: update, log, validate, checkpoint, stop (DDP)
validation            validation inputs and BLEU
average, finetune, shrink   checkpoint averaging (section 6.1); --init; shrinking a teacher
distill               sequence-level knowledge distillation
distributed, cpu_warning    devices and process groups; the CPU's projected training time
plot                  the curves of a run
command, distill_command, plot_command   `nmt train / average`, `nmt distill`, `nmt plot`
"""
