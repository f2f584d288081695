"""Third-party agent CLIs as harnesses: installing them, and their scripted experts.

The ``[agent]`` slot of a harness file (:mod:`tackroom.harness.agent`) names the
CLI; :mod:`tackroom.agents.install` puts it in a content-addressed cache;
:mod:`tackroom.runner.agent` runs it in the task's sandbox behind the model
gateway; :mod:`tackroom.agents.experts` answers its model calls with a task's
reference solution, in the CLI's own format.
"""
