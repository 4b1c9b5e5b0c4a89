"""grader.spec"""
