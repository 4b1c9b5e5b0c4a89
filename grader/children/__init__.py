"""grader.children"""
