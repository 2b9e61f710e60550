"""Running a grid: config, grid arguments, runner, executors, worker, one job."""
