"""grader.gpu: a grading's GPU steps, their children and their one schedule."""
