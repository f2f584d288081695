"""The MiniWoB++ task catalog: every task page of the ``miniwob`` package that
loads and can be expressed with tackroom's action kinds.

``requires`` is honest about what an action interface needs to solve a task
at all: ``drag`` for drag-and-drop and drawing, ``press`` for keys other than
typing text, ``scroll`` where scrolling is the point. ``meta["coords"]`` marks
tasks whose answer is a *point* (click the centre of a circle, a grid cell),
which need coordinate clicks rather than a click on an element.

Left out: the ``flight.*`` tasks (a separate site with its own window size),
and ``chase-circle``, ``hover-shape`` and ``hot-cold``, which need the mouse to
move or hover, which no action kind expresses.
"""

from __future__ import annotations

from tackroom.core.task import Task
from tackroom.suites.miniwob.experts import EXPERTS

SUITE = "miniwob"

# task | capabilities (c=click t=type p=press d=drag s=scroll, *=point clicks) | description
_TABLE = """
ascending-numbers | c | click the numbers in ascending order
bisect-angle | c* | place a line that bisects an angle, then submit
book-flight | ct | book the cheapest/shortest flight with autocomplete and a date picker
book-flight-nodelay | ct | book-flight without loading delays
button-delay | c | click ONE, wait, then click TWO
buy-ticket | c | buy the ticket with the cheapest cost or shortest duration
choose-date | c | pick a date in a jQuery date picker and submit
choose-date-easy | c | choose-date within the current month
choose-date-medium | c | choose-date within a few months
choose-date-nodelay | c | choose-date without animation delays
choose-list | ct | select an item from a drop-down list and submit
circle-center | c* | click the centre of a circle, then submit
click-button | c | click the button with the given label
click-button-sequence | c | click button ONE, then button TWO
click-checkboxes | c | tick the named checkboxes and submit
click-checkboxes-large | c | click-checkboxes with many boxes
click-checkboxes-soft | c | tick the boxes whose words are similar to given words
click-checkboxes-transfer | c | click-checkboxes, including selecting nothing
click-collapsible | c | expand a collapsible section and click submit
click-collapsible-2 | c | expand sections to find and click a link
click-collapsible-2-nodelay | c | click-collapsible-2 without animation
click-collapsible-nodelay | c | click-collapsible without animation
click-color | c | click the box of the named colour
click-dialog | c | close a dialog with its x button
click-dialog-2 | c | click the named button of a dialog
click-link | c | click the link with the given text
click-menu | c | open nested menus and click the named item
click-menu-2 | c | open a menu and click an item named by label or icon
click-option | c | choose the named radio button and submit
click-pie | c | expand a pie menu and click the labelled slice
click-pie-nodelay | c | click-pie without animation
click-scroll-list | cps | select several items of a multi-select list and submit
click-shades | c | select all shades of a colour and submit
click-shape | c | click the described shape
click-tab | c | click the numbered tab
click-tab-2 | c | switch tabs to find and click a link
click-tab-2-easy | c | click-tab-2 with fewer links
click-tab-2-hard | c | click-tab-2 with more tabs and links
click-tab-2-medium | c | click-tab-2, medium difficulty
click-test | c | click the only button
click-test-2 | c | click the named one of two buttons
click-test-transfer | c | click-test-2 with different wording
click-widget | c | click a widget of the named kind
copy-paste | ct | copy a text area's text into a text box and submit
copy-paste-2 | ct | copy the text of the n-th text area into a text box
count-shape | c | count the described shapes and click the answer
count-sides | c | click the number of sides of a drawn shape
daily-calendar | ctd | create a named calendar event by dragging over a time span
drag-box | cd | drag a small box into a larger one
drag-circle | cd | drag a circle in a direction, then submit
drag-cube | cd | rotate a cube by dragging until a face shows
drag-items | cd | drag a list item to a position
drag-items-grid | cd | drag a grid item in a direction
drag-shapes | cd | drag the named shapes into a box
drag-shapes-2 | cd | sort shapes into two boxes by dragging
drag-single-shape | cd | drag a shape in a direction, then submit
drag-sort-numbers | cd | sort a list of numbers by dragging
draw-circle | cd | draw a circle around a point by dragging
draw-line | cd | draw a line through a dot by dragging
email-inbox | ct | delete, star, forward or reply to an email
email-inbox-delete | c | delete the email from a sender
email-inbox-forward | ct | forward the email from a sender to someone
email-inbox-forward-nl | ct | email-inbox-forward with a natural-language request
email-inbox-forward-nl-turk | ct | email-inbox-forward with crowd-written requests
email-inbox-important | c | star the email from a sender
email-inbox-nl-turk | ct | email-inbox with crowd-written requests
email-inbox-noscroll | ct | email-inbox with a short inbox
email-inbox-reply | ct | reply to the email from a sender with a text
email-inbox-star-reply | ct | star and reply to an email
enter-date | ct | enter a date into a date field and submit
enter-password | ct | enter a password into two fields and submit
enter-text | ct | enter a text into a field and submit
enter-text-2 | ct | enter a text in upper or lower case and submit
enter-text-dynamic | ct | enter a random string into a field and submit
enter-time | ct | enter a time into a time field and submit
find-greatest | c | flip cards to find the greatest number, then submit
find-midpoint | c* | click the midpoint between two points, then submit
find-word | ct | type the n-th word of a paragraph and submit
focus-text | c | focus the text box
focus-text-2 | c | focus the n-th text box
form-sequence | cp | set a slider, tick a checkbox, then submit
form-sequence-2 | ct | choose a radio button and type a number into a box
form-sequence-3 | c | choose from a styled drop-down, then click a button
generate-number | c | generate numbers until one meets a condition, then submit
grid-coordinate | c* | click the given coordinate on a grid
guess-number | ctp | guess a number from higher/lower hints (clearing a guess needs keys)
highlight-text | cd | select the text of a paragraph and submit
highlight-text-2 | cd | select the text of the n-th paragraph and submit
identify-shape | c | click the button that names the drawn figure
login-user | ct | enter a username and password and log in
login-user-popup | ct | login-user, dismissing a popup that may appear
moving-items | c | click moving circles
multi-layouts | ct | fill a movie-search form laid out in varying ways
multi-orderings | ct | fill a movie-search form with fields in varying order
navigate-tree | c | expand folders to find and click a named file or folder
number-checkboxes | c | draw a digit by ticking checkboxes
odd-or-even | c | mark numbers as odd or even and submit
order-food | c | order the named food items
phone-book | c | find a contact and click one of their details
read-table | ct | type the value of a table row and submit
read-table-2 | ct | fill a form from a table's values
resize-textarea | cd | resize a text area by dragging its corner
right-angle | c* | place a third point to make a right angle
scroll-text | ct | type the last word of a scrolling text area
scroll-text-2 | cs | scroll a text area to its top or bottom, then submit
search-engine | ct | search, then click the n-th result across pages
sign-agreement | cts | scroll an agreement, sign it, and agree or cancel
simon-says | c | repeat the sequence of flashing buttons
simple-algebra | ct | solve for x and submit
simple-arithmetic | ct | solve a sum and submit
social-media | c | click a tweet action for a user
social-media-all | c | click an action on all posts by a user, then submit
social-media-some | c | click an action on some posts by a user, then submit
stock-market | c | buy a stock when its price drops below a value
terminal | ctp | use a toy terminal to delete a file
text-editor | cpd | style text in a rich text editor
text-transform | ct | type a distorted text and submit
tic-tac-toe | c | win a game of tic-tac-toe as X
unicode-test | c | click the button with a unicode label
use-autocomplete | ct | pick an autocompleted item by prefix and suffix
use-autocomplete-nodelay | ct | use-autocomplete without delays
use-colorwheel | c* | pick a named colour on a colour wheel
use-colorwheel-2 | c* | pick a shown colour on a colour wheel
use-slider | cp | set a slider to a value (arrow keys or dragging), then submit
use-slider-2 | cp | set three sliders to values, then submit
use-spinner | c | set a spinner to a value, then submit
visual-addition | ct | count blocks and type the total
"""

_CAPS = {"c": "click", "t": "type", "p": "press", "d": "drag", "s": "scroll"}


def _build() -> dict[str, Task]:
    tasks: dict[str, Task] = {}
    for line in _TABLE.strip().splitlines():
        task_id, caps, description = (part.strip() for part in line.split("|"))
        meta = {"coords": True} if "*" in caps else {}
        tasks[task_id] = Task(
            id=task_id, suite=SUITE,
            requires=frozenset(_CAPS[c] for c in caps if c in _CAPS),
            description=description, has_expert=task_id in EXPERTS, meta=meta)
    return tasks


#: task id -> Task, in alphabetical order.
TASKS: dict[str, Task] = _build()
