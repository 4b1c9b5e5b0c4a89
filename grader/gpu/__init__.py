"""grader.gpu: a grading's GPU plan, the steps that follow it, and the session that owns its children and their one schedule."""
