"""grader.outputs"""
