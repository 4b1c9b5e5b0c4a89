"""grader.instructor"""
