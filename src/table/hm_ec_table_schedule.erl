%% @doc When an EC table copy runs its core's steps, and in what order it takes the work that
%% arrives: the schedule the runtime's table process ({@link hm_ec_table_server}) keeps and
%% the simulator models with the same values and the same queue. Pure.
%%
%% <ul>
%% <li>A tick ({@link hm_ec_table:tick/2}) every {@link tick_ms/0}: acknowledgements,
%% retransmission, stabilization.</li>
%% <li>A busy copy runs its stability step ({@link hm_ec_table:acknowledge/2}) {@link
%% ack_ms/0} after a write, a member's operations or an acknowledgement arrived, so that
%% stability follows the load between ticks; an idle copy runs none.</li>
%% <li>Members' operations wait in a work queue ({@link new_queue/0}, {@link enqueue/4}) and
%% are applied at most {@link work_batch/0} at a time ({@link take/2}), while local writes,
%% acknowledgements and ticks that arrived meanwhile go first. After a partition heals a
%% copy receives the other side's operations all at once; applied as they arrived, they
%% would stand in front of every local write, and writers would stall for seconds.</li>
%% </ul>
-module(hm_ec_table_schedule).

-export([tick_ms/0, ack_ms/0, work_batch/0]).
-export([new_queue/0, enqueue/4, take/2, queued/1, batches/1]).
-export_type([work_queue/0]).

%% The operations as they arrived, a member's message at a time, and how many in all.
-opaque work_queue() :: {queue:queue({term(), node(), [term()], pos_integer()}),
                         non_neg_integer()}.

%% @doc Milliseconds between two ticks of a table's copy.
-spec tick_ms() -> pos_integer().
tick_ms() -> 250.

%% @doc Milliseconds from the first work that arrives at an idle copy to its stability step.
-spec ack_ms() -> pos_integer().
ack_ms() -> 20.

%% @doc How many queued operations of other members a copy applies in one step before it
%% turns to whatever else arrived meanwhile (local writes, acknowledgements, ticks). A batch
%% of 32 takes about a tenth of a millisecond, short enough that a heal's backlog never
%% stalls a copy's own writers, and long enough to spread the step's own costs (the
%% process's loop, its queue, its clock) over many operations.
-spec work_batch() -> pos_integer().
work_batch() -> 32.

%% @doc An empty work queue.
-spec new_queue() -> work_queue().
new_queue() -> {queue:new(), 0}.

%% @doc Member `From''s operations `Ops' for table instance `Cookie', at the back of the queue.
-spec enqueue(term(), node(), [term()], work_queue()) -> work_queue().
enqueue(_Cookie, _From, [], Q) -> Q;
enqueue(Cookie, From, Ops, {Q, N}) ->
    Count = length(Ops),
    {queue:in({Cookie, From, Ops, Count}, Q), N + Count}.

%% @doc Up to `Max' operations of the member's message at the front of the queue, for one
%% step of the core (the rest of that message stays first), or `empty'.
-spec take(pos_integer(), work_queue()) ->
          {{term(), node(), [term()]}, work_queue()} | empty.
take(Max, {Q, N}) ->
    case queue:out(Q) of
        {empty, _} -> empty;
        {{value, {Cookie, From, Ops, Count}}, Q1} when Count =< Max ->
            {{Cookie, From, Ops}, {Q1, N - Count}};
        {{value, {Cookie, From, Ops, Count}}, Q1} ->
            {Now, Later} = lists:split(Max, Ops),
            {{Cookie, From, Now}, {queue:in_r({Cookie, From, Later, Count - Max}, Q1), N - Max}}
    end.

%% @doc How many operations wait in the queue.
-spec queued(work_queue()) -> non_neg_integer().
queued({_, N}) -> N.

%% @doc A member's operations in the batches a copy applies them in (what {@link take/2}
%% gives one step at a time).
-spec batches([term()]) -> [[term()]].
batches(Ops) ->
    Max = work_batch(),
    case length(Ops) =< Max of
        true -> [Ops];
        false -> {H, T} = lists:split(Max, Ops), [H | batches(T)]
    end.
