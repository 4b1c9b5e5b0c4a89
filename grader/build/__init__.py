"""grader.build"""
