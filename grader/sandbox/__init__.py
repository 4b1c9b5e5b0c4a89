"""grader.sandbox"""
