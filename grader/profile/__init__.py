"""grader.profile"""
