%% @doc The plan of one fragment's move when the pool of a partitioned EC table changes
%% ({@link hm_partition:change_table_frag/2}). The ring says which nodes gain a copy of the
%% fragment and which lose one ({@link hm_ring:moves/2}); the plan says, from the nodes that
%% hold a copy now and which of them are up, what is done and in which order:
%%
%% <ol>
%% <li>`drop': the leaving copies on nodes that are down are removed first, without handing
%% anything over (a node that is down cannot). Mnesia adds no copy of a table one of whose
%% holders it cannot reach, so they must go before any copy is added. What such a node had
%% not sent to another copy is lost with it: this is for a node gone for good.</li>
%% <li>`add': a new copy on each node the ring adds that holds none yet (a change that was
%% made before and interrupted is not done again). Each starts empty and catches up by state
%% transfer from the copies that stay; it is ready before the next step.</li>
%% <li>`hand_over': the leaving copies on nodes that are up are removed last, each once every
%% other holder has delivered what it must hand over ({@link hm_partition:removable/3}), so
%% that no operation it took or relayed is lost.</li>
%% </ol>
%%
%% Invariants: a node is in at most one of the three lists; a node that is down is never in
%% `hand_over'; a node is in `drop' or `hand_over' only if it holds a copy now and the ring
%% removes it; a node is in `add' only if it holds no copy now. Pure: the runtime
%% ({@link hm_partition}) and the simulator take their steps from this one function.
-module(hm_frag_move).

-export([plan/3]).
-export_type([move/0, plan/0]).

%% One fragment's move from the ring: the fragment, the nodes that gain a copy, the nodes
%% that lose one.
-type move() :: {pos_integer(), [node()], [node()]}.
-type plan() :: #{drop := [node()], add := [node()], hand_over := [node()]}.

%% @doc The plan of move `Move' for a fragment whose copies are on `Holders' now, where
%% `IsUp(Node)' says whether a node is up (reachable). Each list keeps the order of the
%% move's.
-spec plan([node()], move(), fun((node()) -> boolean())) -> plan().
plan(Holders, {_K, Add, Remove}, IsUp) ->
    Leaving = [N || N <- Remove, lists:member(N, Holders)],
    {Up, Down} = lists:partition(IsUp, Leaving),
    #{drop => Down,
      add => [N || N <- Add, not lists:member(N, Holders)],
      hand_over => Up}.
