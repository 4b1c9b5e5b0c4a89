#inc\
lude "/dev/urandom"
