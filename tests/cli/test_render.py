"""What `trimaran wait` shows while an experiment runs."""

from trimaran.cli.render import experiment_progress


def _experiment(**status: object) -> dict:
    return {"spec": {"maxTrialCount": 12, "objective": {"type": "maximize", "objectiveMetricName": "accuracy"}},
            "status": {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}],
                       **status}}


def test_progress_counts_every_finished_state_and_shows_the_best_objective():
    exp = _experiment(trialsSucceeded=3, trialsEarlyStopped=1, trialsFailed=1, trialsRunning=2,
                      currentOptimalTrial={"observation": {"metrics": [
                          {"name": "accuracy", "min": "0.1", "max": "0.93", "latest": "0.9"}]}})
    assert experiment_progress(exp) == ("Running, 5/12 trials done, 2 running, 1 early-stopped, 1 failed, "
                                        "best accuracy 0.93")


def test_progress_before_any_trial_has_no_best():
    assert experiment_progress({"spec": {}, "status": {}}) == "Pending, 0/? trials done, 0 running"


def test_a_runs_progress_counts_loop_iterations_under_their_task_name():
    from trimaran.cli.pipelines import progress

    tasks = [{"id": f"for-loop-2.iteration-{i}.add-2", "name": "add-2", "state": "RUNNING"} for i in range(3)]
    tasks += [{"id": "train", "name": "train", "state": "RUNNING"},
              {"id": "prep", "name": "prep", "state": "SUCCEEDED"}]
    run = {"status": {"state": "RUNNING", "tasks": tasks}}
    assert progress(run) == "RUNNING: 1/5 tasks done; running: add-2 ×3, train"
