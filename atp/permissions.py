"""The permissions django-atp's pages and admin check, by what they let a user do."""

#: Seeing tasks: their state, history and progress.
VIEW = "atp.view_instance"
#: Changing tasks through the buttons and admin actions (re-enqueue, pause, resume, cancel).
CHANGE = "atp.change_instance"
#: Deleting tasks (queued or ended), one or many.
DELETE = "atp.delete_instance"
#: Seeing what tasks were given and what they gave back: the view permissions of the
#: Inputs and Response models, which may hold what others must not read. Whatever holds
#: the inputs of tasks to come (a schedule, a batch's on-complete task) shows them only
#: to those who hold ``VIEW_INPUTS`` too.
VIEW_INPUTS = "atp.view_inputs"
VIEW_RESPONSE = "atp.view_response"
#: Writing what tasks are given, wherever it is written (a schedule's inputs, its type):
#: the change permission of the Inputs model. The handlers of ``atp.defer`` and of
#: Django's Tasks call the function their inputs name, with the arguments they name, so
#: this permission amounts to running code (see docs/security.md).
WRITE_INPUTS = "atp.change_inputs"
