"""The replay teacher: a task's gold patch reached and made through the agent's own tools along
the clues a student has (``replay``, ``replay_route``, ``clues``, ``source_map``), the check of
whether a run could have been imitated (``imitable``) and the teacher's corrections of a
student's runs (``corrections``). The agent loop never imports it: a teacher is one more
ChatModel, and it reads the repository through that protocol's ``prepare`` hook."""
