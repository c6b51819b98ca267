"""The permissions django-atp's pages and admin check, by what they let a user do."""

#: Seeing tasks: their state, history and progress.
VIEW = "atp.view_instance"
#: Changing tasks through the buttons and admin actions (re-enqueue, pause, resume, cancel).
CHANGE = "atp.change_instance"
#: Seeing what tasks were given and what they gave back: the view permissions of the
#: Inputs and Response models, which may hold what others must not read.
VIEW_INPUTS = "atp.view_inputs"
VIEW_RESPONSE = "atp.view_response"
