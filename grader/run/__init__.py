"""grader.run"""
