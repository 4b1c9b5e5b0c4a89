"""grader.score"""
