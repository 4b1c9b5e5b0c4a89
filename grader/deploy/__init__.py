"""grader.deploy"""
