"""grader.compile"""
